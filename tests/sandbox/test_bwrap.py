"""bwrap hardened, and bwrap as the outer layer of the sandbox (as root here): the child keeps
no capability, cannot use open_by_handle_at to escape its binds, cannot read /etc/shadow or
the supervisor's working directory; with the sandbox inside, Landlock, seccomp and
no_new_privs hold too."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from git_payloads import repository
from sandbox_targets import (
    CHILDREN,
    HERE,
    PY,
    WHY_NOT,
    config,
    needs_root,
    needs_sandbox,
    run_bash,
)

from tether.parent.supervisor import Supervisor

pytestmark = [pytest.mark.anyio, needs_root]


def _bwrap_works() -> str | None:
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (scripts/test installs bubblewrap)"
    got = subprocess.run(
        ["bwrap", "--unshare-user", "--ro-bind", "/", "/", "true"], capture_output=True
    )
    return None if got.returncode == 0 else got.stderr.decode().strip()


needs_bwrap = pytest.mark.skipif(_bwrap_works() is not None, reason=str(_bwrap_works()))


async def _probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolation: str) -> dict:  # type: ignore[type-arg]
    cwd = tmp_path / "supervisor-cwd"
    cwd.mkdir(parents=True)
    (cwd / "canary.txt").write_text("the supervisor's own files\n")
    monkeypatch.chdir(cwd)
    ws = tmp_path / "ws"
    ws.mkdir()
    # The canary's path goes in the environment: a path named in the command is granted.
    cfg = config(
        launcher="bwrap",
        isolation=isolation,
        read_paths=[str(CHILDREN)],
        env={"CANARY_PATH": str(cwd / "canary.txt")},
    )
    async with Supervisor(cfg) as sup:
        with anyio.fail_after(60):
            result = await sup.run(
                "probe",
                workspace=ws,
                command=[PY, "-I", str(HERE / "bwrap_probe.py")],
            )
    assert result.success, result
    report: dict = json.loads((ws / "probe.json").read_text())  # type: ignore[type-arg]
    assert result.isolation is not None
    report["level"] = result.isolation.level
    return report


@needs_bwrap
@pytest.mark.parametrize("isolation", ["process", "sandbox"])
async def test_a_bwrap_child_has_no_capability_no_shadow_no_handle_escape_and_no_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolation: str
) -> None:
    if isolation == "sandbox" and WHY_NOT:
        pytest.skip(f"no sandbox here: {WHY_NOT}")
    report = await _probe(tmp_path, monkeypatch, isolation)
    caps = report["status"]
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(caps[name], 16) == 0, (name, caps)
    assert report["read_etc_shadow"].startswith("refused")
    assert report["open_by_handle_at"] == "refused: EPERM"
    assert report["cwd_canary"] == "refused: ENOENT", "the supervisor's cwd is bound"
    assert report["write_workspace"].startswith("ok")
    assert report["etc"] == {"shadow": False, "passwd": True, "ssh": False}
    assert report["level"] == isolation


@needs_bwrap
@needs_sandbox
async def test_the_sandbox_inside_bwrap_adds_landlock_seccomp_and_no_new_privs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = await _probe(tmp_path / "a", monkeypatch, "sandbox")
    alone = await _probe(tmp_path / "b", monkeypatch, "process")
    assert inside["status"]["NoNewPrivs"] == "1" and inside["status"]["Seccomp"] == "2"
    assert inside["udp"] == "refused: EAFNOSUPPORT"
    assert inside["mkdir_root"] == "refused: EACCES"  # Landlock: / is not granted
    # Without the sandbox, bwrap alone lets the child make a UDP socket (there is no network
    # to send it to) and create directories in its own tmpfs root.
    assert alone["udp"].startswith("ok") and alone["mkdir_root"].startswith("ok")


@needs_bwrap
@needs_sandbox
async def test_under_bwrap_git_is_not_guarded_and_what_is_planted_there_is_listed(
    tmp_path: Path,
) -> None:
    """bwrap's root is not one the inner sandbox can make a user namespace in, so the `.git`
    guard is not applied under it (docs/containment.md); the parent's watch still lists a
    planted hook with its content."""
    ws = repository(tmp_path)
    command = "printf '#!/bin/sh\\ntouch x\\n' > .git/hooks/post-checkout && echo planted"
    async with Supervisor(config(launcher="bwrap", isolation="sandbox")) as sup:
        with anyio.fail_after(120):
            result, out = await run_bash(sup, ws, command)
    assert "planted" in out, out
    (hook,) = result.sensitive_changes
    assert (hook.path, hook.change, hook.content) == (
        ".git/hooks/post-checkout",
        "added",
        "#!/bin/sh\ntouch x\n",
    )
