"""A sandboxed warm pool: its children are confined to one workspace from their first
instruction, so they serve runs in that workspace only, and a pool without one is refused."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.isolation import probe_host
from tether.parent.supervisor import ChildConfig, PoolSpec, Supervisor

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        probe_host().why_not is not None, reason=f"no sandbox here: {probe_host().why_not}"
    ),
]

COMPLETE = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
    "arguments": {"summary": "done", "paths": []}}]}]}"""


def _model() -> ScriptedModel:
    return ScriptedModel.from_json(COMPLETE)


async def test_a_sandboxed_pool_serves_runs_in_its_workspace_and_no_other(tmp_path: Path) -> None:
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    async with Supervisor(pool=PoolSpec(1, workspace=mine)) as sup:
        assert sup.pool is not None
        with anyio.fail_after(20):
            await sup.pool.wait_ready()
        (pooled,) = sup.pool.ready_pids
        elsewhere = await sup.start("go", workspace=other, model=_model())
        with anyio.fail_after(20):
            assert (await elsewhere.result()).success
        assert elsewhere.pid != pooled
        here = await sup.start("go", workspace=mine, model=_model())
        with anyio.fail_after(20):
            result = await here.result()
        assert result.success, result
        assert here.pid == pooled
        assert result.isolation is not None and result.isolation.level == "sandbox"


def test_a_sandboxed_pool_without_a_workspace_is_bad_usage() -> None:
    with pytest.raises(ValueError, match=r"PoolSpec\(workspace=\.\.\.\)"):
        Supervisor(pool=PoolSpec(1))


def test_a_process_level_pool_needs_no_workspace() -> None:
    Supervisor(ChildConfig(isolation="process"), pool=PoolSpec(1))
