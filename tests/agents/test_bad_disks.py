"""A full disk and a read-only store under a running supervisor: the storage's trouble never
escapes `async with Supervisor`, `send_message` raises the documented exception, the CLI says
one line (exit 4), a lease that cannot be released is an event and a note in the agent's next
result while its child is disposed all the same, and nothing stored before is lost.

Each scenario runs in `disk_host.py` with its state directory on a tmpfs of its own (root).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tmpfs import on_tmpfs, why_not

HOST = Path(__file__).parent / "disk_host.py"

pytestmark = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))


def _scenario(tmp_path: Path, workspace: Path, what: str) -> dict[str, dict[str, Any]]:
    got = on_tmpfs(
        tmp_path / "mnt",
        "4m",
        [sys.executable, str(HOST), what, str(tmp_path / "mnt"), str(workspace)],
        timeout=240,
    )
    steps = {}
    for line in got.stdout.splitlines():
        step = json.loads(line)
        steps[step.pop("step")] = step
    assert "closed" in steps, f"rc {got.returncode}\n{got.stdout}\n{got.stderr[-4000:]}"
    assert "Traceback" not in got.stderr, got.stderr[-4000:]
    return steps


def _one_line(run: dict[str, Any], rc: int, *needles: str) -> None:
    assert run["rc"] == rc, run
    lines = run["stderr"].splitlines()
    assert len(lines) == 1 and lines[0].startswith("tether: "), run["stderr"]
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_full_disk_never_takes_the_supervisor_down_and_loses_nothing_stored(
    tmp_path: Path, workspace: Path
) -> None:
    steps = _scenario(tmp_path, workspace, "full")
    db = str(tmp_path / "mnt" / "state" / "sessions.sqlite3")
    ready = steps["ready"]
    assert ready["ok"] and ready["warm"]
    assert steps["filled"]["bytes"] > 0
    # A follow-up to the warm child: the documented exception, before anything was sent.
    warm = steps["warm"]
    assert warm["error"] == "StoreFull" and db in warm["message"]
    assert "file system is full" in warm["message"] and "\n" not in warm["message"]
    # While the child idled its lease could not be renewed, and once the keep-alive passed
    # the child is gone and its lease could not be released: events, each one line.
    gone = steps["kept alive no longer"]
    assert gone["child_alive"] is False
    said = [t["message"] for t in gone["troubles"]]
    assert any(m.startswith("its lease could not be renewed: ") for m in said), said
    assert any(m.startswith("its lease could not be released (it goes stale): ") for m in said)
    assert all("file system is full" in m and db in m and "\n" not in m for m in said), said
    # A cold resume on a full disk: the documented exception too.
    assert steps["cold"]["error"] == "StoreFull"
    # The CLI: one line naming the file and what to do, exit 4; reading still works.
    _one_line(steps["cli"]["send"], 4, db, "file system is full", "free some space")
    assert steps["cli"]["list"]["rc"] == 0, steps["cli"]["list"]
    # Space again: every refused message left the transcript exactly as it was.
    assert steps["freed"]["transcript"] == ready["transcript"]
    assert steps["freed"]["other_same"]
    resumed = steps["resumed"]
    assert resumed["success"]
    assert resumed["summary"] == "seen: first | second | sixth, with room again"
    # The next result carries what the store could not do meanwhile.
    assert "the session store: its lease could not be renewed" in resumed["message"]
    assert "the session store: its lease could not be released" in resumed["message"]
    # Closing on a full disk with the child warm: the release fails, the close goes on.
    assert resumed["warm"]
    assert any("could not be released" in m for m in steps["closed"]["troubles"])
    reopened = steps["reopened"]
    assert reopened["transcript"][: len(ready["transcript"])] == ready["transcript"]
    assert "user:sixth, with room again" in reopened["transcript"]
    assert reopened["status"] == "idle"  # the answer was stored before the disk filled again


def test_a_read_only_store_is_one_line_everywhere_and_intact_afterwards(
    tmp_path: Path, workspace: Path
) -> None:
    steps = _scenario(tmp_path, workspace, "read-only")
    assert steps["remounted"]["rc"] == 0, steps["remounted"]
    db = str(tmp_path / "mnt" / "state" / "sessions.sqlite3")
    cli = steps["cli"]
    for run in (cli["list"], cli["show"], cli["send"]):
        _one_line(run, 4, db, "cannot be written", "remounted read-write")
    assert steps["send"]["error"] == "StoreReadOnly" and db in steps["send"]["message"]
    assert steps["remounted rw"]["same"]
