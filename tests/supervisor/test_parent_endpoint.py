"""The parent answers a child's bad requests with the right JSON-RPC errors and goes on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.config import ChildConfig
from tether.parent.run.events import Event
from tether.parent.supervisor import Supervisor

CHILDREN = Path(__file__).resolve().parent.parent / "children"

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""


async def test_unknown_methods_and_bad_params_from_the_child_get_32601_and_32602(
    tmp_path: Path,
) -> None:
    async with Supervisor() as sup:
        result = await sup.run(
            "go",
            workspace=tmp_path,
            model=ScriptedModel.from_json("[]"),
            command=[sys.executable, "-I", str(CHILDREN / "asks_badly.py")],
        )
    assert result.success, result
    assert result.summary == "-32601 -32602"


@pytest.mark.in_memory
async def test_a_listener_that_raises_does_not_break_the_run(tmp_path: Path) -> None:
    def broken(ev: Event) -> None:
        raise RuntimeError("listener bug")

    script = '[{"text": "ok", "toolCalls": [{"name": "complete", "arguments": {"summary": "s"}}]}]'
    async with Supervisor(IN_MEMORY) as sup:
        sup.subscribe(broken)
        result = await sup.run(
            "go", workspace=tmp_path, model=ScriptedModel.from_json(script), on_event=broken
        )
    assert result.success and result.summary == "s"


async def test_starting_a_run_outside_the_supervisors_context_is_a_usage_error(
    tmp_path: Path,
) -> None:
    sup = Supervisor()
    with pytest.raises(RuntimeError, match="async with Supervisor"):
        await sup.start("go", workspace=tmp_path)
