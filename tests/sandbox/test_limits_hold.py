"""A root-started child cannot leave its cgroup or raise its limits: in the sandbox it runs as
an unprivileged uid with no capability, so `processes=20, memory=200M` hold on every
containment tier, from the API and from `tether run`."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from sandbox_targets import CHILDREN, HERE, PY, config, needs_root, needs_sandbox

from tether.contain.plan import DEFAULT_SANDBOX_ID
from tether.parent.process.limits import Limits
from tether.parent.supervisor import Supervisor

pytestmark = [pytest.mark.anyio, needs_sandbox, needs_root]
GREEDY = HERE / "greedy_child.py"
LIMITS = Limits(processes=20, memory="200M", wall="60s")


def _held(report: dict[str, object]) -> None:
    for name in ("raise_nproc", "raise_data", "raise_as", "leave_cgroup"):
        assert str(report[name]).startswith(("refused", "ok: 'no hard limit")), (name, report)
    assert not str(report["raise_nproc"]).startswith("ok"), report
    assert isinstance(report["spawned"], int) and report["spawned"] < 20, report


async def test_a_sandboxed_root_started_child_keeps_its_process_and_memory_limits(
    tmp_path: Path, tier: str
) -> None:
    # A uid of this test's own: on the process-group tier the limit is RLIMIT_NPROC, which
    # counts every process of the uid, and sandboxed children of tests running beside this
    # one (another pytest worker) share the default sandbox uid (docs/containment.md).
    own = DEFAULT_SANDBOX_ID + 1 + os.getpid() % 100_000
    cfg = dataclasses.replace(
        config(read_paths=[str(CHILDREN)], sandbox_user=(own, own)), containment=tier
    )
    async with Supervisor(cfg) as sup:
        with anyio.fail_after(90):
            result = await sup.run(
                "greed", workspace=tmp_path, command=[PY, "-I", str(GREEDY)], limits=LIMITS
            )
    _held(json.loads((tmp_path / "greedy.json").read_text()))
    if result.failure is not None:
        assert result.failure.kind in ("oom", "tasks_limit", "exit_nonzero", "crashed"), result
    else:
        assert result.summary.startswith("MemoryError"), result


def test_tether_run_holds_processes_20_and_memory_200m_for_a_greedy_child(
    tmp_path: Path,
) -> None:
    # The child's scripts side by side in one folder: the command names it, so it is granted.
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for source in (GREEDY, HERE / "attacks.py", CHILDREN / "_wire.py"):
        shutil.copy(source, scripts / source.name)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.parent.cli",
            "run",
            "greed",
            "--workspace",
            str(workspace),
            "--command",
            f"{PY} -I {scripts / GREEDY.name}",
            "--processes",
            "20",
            "--memory",
            "200M",
            "--timeout",
            "60s",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode in (0, 1), got.stderr
    _held(json.loads((workspace / "greedy.json").read_text()))
    result = json.loads(got.stdout)
    assert result["isolation"]["level"] == "sandbox"
    assert result["success"] is False or result["summary"].startswith("MemoryError"), result
