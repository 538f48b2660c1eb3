"""A sandboxed workspace that holds the interpreter's own import path (the virtualenv, tether's
sources for an editable install): a root supervisor mounts that code read-only inside the
workspace, because the supervisor imports it later and every new child's trampoline runs it
before its sandbox; without private mounts (a user supervisor) such a workspace is refused."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import pytest
from sandbox_targets import config, needs_root, needs_sandbox, run_bash

import tether
import tether.contain
from tether.parent.process.isolation import code_inside, workspace_problem
from tether.parent.supervisor import Supervisor

pytestmark = pytest.mark.anyio

PROBE = "tether-attack-probe"
REPO = Path(sys.prefix).parent
SITE = Path(sysconfig.get_paths()["purelib"])
CONTAIN = Path(tether.contain.__file__ or "").resolve().parent
TOP = Path(tether.__file__ or "").resolve().parent
"""Where the top package's sources are (a strict editable install: the checkout's `api/`)."""


def test_a_workspace_that_contains_the_interpreters_code_needs_private_mounts() -> None:
    ws = str(REPO.resolve())
    assert str(Path(sys.prefix).resolve()) in code_inside(ws)
    refused = workspace_problem(ws)
    assert refused is not None and "or run the supervisor as root" in refused
    assert workspace_problem(ws, protects_code=True) is None
    # The virtualenv itself is the code: no mount can make it the workspace.
    itself = workspace_problem(str(Path(sys.prefix).resolve()), protects_code=True)
    assert itself is not None and "does not hold the virtualenv" in itself


@needs_sandbox
@needs_root
@pytest.mark.parametrize("spawner", ["exec", "zygote"])
async def test_a_sandboxed_child_cannot_change_the_code_its_workspace_holds(spawner: str) -> None:
    if not str(SITE.resolve()).startswith(str(REPO.resolve()) + "/"):
        pytest.skip(f"site-packages {SITE} is not inside {REPO}")
    planted = [SITE / f"{PROBE}.pth", CONTAIN / f"{PROBE}.py", TOP / f"{PROBE}.py"]
    allowed = REPO / f"{PROBE}.txt"
    try:
        async with Supervisor(config(isolation="sandbox", spawner=spawner)) as sup:
            command = "; ".join(
                f"(echo 'import os' > {p} && echo wrote {p.name}) 2>&1 | tail -1"
                for p in [*planted, allowed]
            )
            result, out = await run_bash(sup, REPO, command)
        assert result.success, result
        for p in planted:
            assert not p.exists(), f"the sandboxed child wrote {p}"
        assert out.count("Read-only file system") == len(planted), out
        assert allowed.exists(), out
    finally:
        for p in [*planted, allowed]:
            p.unlink(missing_ok=True)
