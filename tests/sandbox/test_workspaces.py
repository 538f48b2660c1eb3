"""A sandboxed run's workspace may not be the system or a place the sandbox replaces with a
private mount: refused as bad usage before anything is spawned."""

from __future__ import annotations

import pytest

from tether.parent import ChildConfig, Supervisor
from tether.parent.isolation import probe_host, workspace_problem

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("bad", ["/", "/tmp", "/var/tmp", "/usr", "/etc/ssl", "/dev/shm/x", "/var"])
def test_the_system_and_the_private_mounts_are_no_workspace(bad: str) -> None:
    assert workspace_problem(bad) is not None


@pytest.mark.parametrize("good", ["/tmp/project", "/work/repo", "/root/project", "/home/me/x"])
def test_an_ordinary_directory_is_a_workspace(good: str) -> None:
    assert workspace_problem(good) is None


async def test_a_sandboxed_run_in_tmp_itself_is_refused_before_any_spawn() -> None:
    if probe_host().why_not:
        pytest.skip(f"no sandbox here: {probe_host().why_not}")
    async with Supervisor(ChildConfig(isolation="sandbox")) as sup:
        with pytest.raises(ValueError, match="cannot be sandboxed"):
            await sup.start("go", workspace="/tmp")
        assert not sup._live
