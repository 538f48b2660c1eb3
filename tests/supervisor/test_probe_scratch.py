"""The isolation probe's scratch directories are named for their supervisor's pid, so the next
probe removes those of a supervisor that died mid-probe (SIGKILLed: it could not), and never
one of a live supervisor or of another user."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tether.parent.process.isolation import SCRATCH_PREFIX, sweep_stale_scratch


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-I", "-c", "pass"])
    proc.wait(timeout=10)
    return proc.pid


def test_a_dead_supervisors_scratch_is_removed_and_a_live_ones_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    dead = tmp_path / f"{SCRATCH_PREFIX}{_dead_pid()}-abc123"
    (dead / "ws" / ".git").mkdir(parents=True)
    (dead / "ws" / ".git" / "config").write_text("[core]\n")
    live = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-def456"
    live.mkdir()
    unrelated = tmp_path / f"{SCRATCH_PREFIX}notapid"
    unrelated.mkdir()
    others = tmp_path / f"{SCRATCH_PREFIX}{_dead_pid()}-ghi789"
    others.mkdir()
    if os.geteuid() == 0:
        os.chown(others, 12345, 12345)  # another user's: theirs to sweep

    removed = sweep_stale_scratch()

    assert not dead.exists()
    assert live.is_dir() and unrelated.is_dir()
    if os.geteuid() == 0:
        assert removed == [str(dead)] and others.is_dir()
    else:
        assert sorted(removed) == sorted([str(dead), str(others)])
