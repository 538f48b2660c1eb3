"""A sandboxed run's workspace may not be the system or a place the sandbox replaces with a
private mount: refused as bad usage before anything is spawned."""

from __future__ import annotations

import os
import sys

import pytest

import tether.contain
from tether.parent import ChildConfig, Supervisor
from tether.parent.process.isolation import probe_host, workspace_problem

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("bad", ["/", "/tmp", "/var/tmp", "/usr", "/etc/ssl", "/dev/shm/x", "/var"])
def test_the_system_and_the_private_mounts_are_no_workspace(bad: str) -> None:
    assert workspace_problem(bad) is not None


@pytest.mark.parametrize("good", ["/tmp/project", "/work/repo", "/root/project", "/home/me/x"])
def test_an_ordinary_directory_is_a_workspace(good: str) -> None:
    assert workspace_problem(good) is None


def test_a_workspace_holding_the_interpreter_or_tethers_code_is_refused() -> None:
    # A sandboxed child writes its workspace: with the virtualenv or tether's sources in it,
    # it could change code that the supervisor imports later and that every new child's
    # trampoline runs before its sandbox.
    contain_dir = os.path.dirname(os.path.realpath(tether.contain.__file__ or ""))
    for holder in (sys.prefix, os.path.dirname(sys.prefix), os.path.dirname(contain_dir)):
        problem = workspace_problem(holder)
        assert problem is not None and "does not hold the virtualenv" in problem, holder


async def test_a_sandboxed_run_in_tmp_itself_is_refused_before_any_spawn() -> None:
    if probe_host().why_not:
        pytest.skip(f"no sandbox here: {probe_host().why_not}")
    async with Supervisor(ChildConfig(isolation="sandbox")) as sup:
        with pytest.raises(ValueError, match="cannot be sandboxed"):
            await sup.start("go", workspace="/tmp")
        assert not sup._live
