"""Layered workspaces under a supervisor that is not root (issue 34, points 6 and 7), run here
as uid 1000 with Debian's /usr/bin/python3, as the sandbox's own non-root tests do: the overlay
in the child's own user namespace (or a forced plain copy) takes every write, the workspace's
real files stay as they were against a hostile child's escapes, and the change set applies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_non_root import AS_USER, DEBIAN_PY, PROJECT, USER, WHY_NOT

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))


@pytest.fixture
def user_ws() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="tether-layered-user-", dir="/tmp"))
    os.chmod(top, 0o755)
    ws = top / "ws"
    ws.mkdir()
    (ws / "canary.txt").write_text("the base\n")
    (ws / "dir").mkdir()
    (ws / "dir" / "inner.txt").write_text("inner\n")
    shutil.copy(HERE / "layer_attacks.py", ws / "layer_attacks.py")
    for p in [top, ws, *ws.rglob("*")]:
        os.lchown(p, USER, USER)
    try:
        yield ws
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _host(
    ws: Path, command: str, *, env: dict[str, str] | None = None, apply: bool = False
) -> dict[str, Any]:
    config = {"workspace": str(ws), "read_paths": PROJECT, "command": command, "apply": apply}
    base = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": ":".join(PROJECT), **(env or {})}
    got = subprocess.run(
        [
            *AS_USER,
            "env",
            "-i",
            *(f"{k}={v}" for k, v in base.items()),
            DEBIAN_PY,
            str(HERE / "layered_host.py"),
            json.dumps(config),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert got.returncode == 0, got.stderr
    out: dict[str, Any] = json.loads(got.stdout.strip().splitlines()[-1])
    return out


def _files(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("forced", [None, "copy"], ids=["overlay-userns", "copy"])
def test_a_non_root_layered_run_writes_only_its_layer_and_its_change_set_applies(
    user_ws: Path, forced: str | None
) -> None:
    before = _files(user_ws)
    env = {"TETHER_LAYER_METHOD": forced} if forced else None
    command = "echo more >> canary.txt && rm dir/inner.txt && echo n > n.txt"
    got = _host(user_ws, command, env=env, apply=True)
    result = got["result"]
    assert result["success"], result
    expected = "copy" if forced else "overlay-userns"
    assert got["method"] == expected and result["changes"]["method"] == expected
    assert {c["path"]: c["change"] for c in result["changes"]["changes"]} == {
        "canary.txt": "modified",
        "dir/inner.txt": "deleted",
        "n.txt": "added",
    }
    assert result["applied"]["state"] == "not_applied"
    # Applied afterwards by the same user: the workspace changes only then.
    assert got["applied"]["state"] == "applied" and got["layers"] == []
    now = _files(user_ws)
    assert now["canary.txt"] == b"the base\nmore\n" and "dir/inner.txt" not in now
    assert before["layer_attacks.py"] == now["layer_attacks.py"]


def test_a_hostile_non_root_child_cannot_reach_the_workspaces_real_files(user_ws: Path) -> None:
    before = _files(user_ws)
    got = _host(user_ws, "python3 layer_attacks.py > report.json")
    assert _files(user_ws) == before
    result = got["result"]
    cs = result["changes"]
    assert cs["method"] == "overlay-userns"
    changed = {c["path"]: c for c in cs["changes"]}
    assert set(changed) == {"canary.txt", "hard.txt", "suid.sh", "report.json"}, (result, got)
    assert changed["suid.sh"]["mode"] == 0o755
    refused = {r["path"]: r["reason"] for r in cs["refused"]}
    assert "absolute" in refused["abs-link"]
    # The report itself came back through the change set.
    diff = changed["report.json"]["diff"]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and line[1:2] == "{"]
    report = json.loads(added[0])
    for name in ("rename_in", "rename_out", "rename_dir_out", "mknod_device", "umount_layer"):
        assert report[name].startswith("refused"), (name, report[name])
    # The overlay's own xattrs are user. here: the overlay refuses them to the child, or (Linux
    # 6.7+) stores them escaped (user.overlay.overlay.*), which the parent reads nothing into:
    # the directory is not taken for an opaque one (dir/inner.txt is not deleted above).
    assert report["user_overlay_xattr"] in ("ok: set", "refused: EPERM")
