"""Providers in an orchestration: a definition names its provider, the task tool's `agentType`
overrides it per call (only among the providers offered; `inprocess` never by default), and an
ACP sub-agent's model calls, brokered through the gateway, reach the ledger and the tree
budget like any other sub-agent's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from book import ORCHESTRATOR, Recorder, complete, script, task, turn

from tether.parent import Supervisor
from tether.parent.delegation import SubagentDefinition, builtin_registry
from tether.parent.process.config import ChildConfig
from tether.parent.run.events import Event, RunFinished

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""

TESTS = Path(__file__).resolve().parent.parent
ACP_AGENT = TESTS / "children" / "acp_agent.py"


def fan_out(*tasks: dict[str, Any], then: str = "all done") -> dict[str, Any]:
    return script(ORCHESTRATOR, turn(*tasks, text="delegating"), turn(complete(then)))


def explorer(summary: str = "looked") -> dict[str, Any]:
    return script("Role: explorer", turn(complete(summary)))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def orchestrator_tool(model: Recorder) -> dict[str, Any]:
    """The `task` tool as the orchestrator's model was shown it."""
    [first] = [r for r in model.requests if any(t.name == "task" for t in r.tools)][:1]
    [tool] = [t for t in first.tools if t.name == "task"]
    return tool.input_schema


@pytest.mark.in_memory
async def test_the_task_tool_offers_the_out_of_process_providers_that_can_run_here(
    workspace: Path,
) -> None:
    model = Recorder(fan_out(task("c1", "explorer", "look", "Look.")), explorer())
    async with Supervisor(IN_MEMORY) as sup:
        got = await sup.orchestrate("Go.", model=model, workspace=workspace)
    assert got.success
    offered = orchestrator_tool(model)["properties"]["agentType"]
    # acp and command need a command, inprocess has no isolation: none is offered.
    assert offered["enum"] == ["spawn", "fork"]


@pytest.mark.in_memory
async def test_agent_type_inprocess_is_refused_unless_the_caller_offers_it(
    workspace: Path,
) -> None:
    call = task("c1", "explorer", "look", "Look.", agentType="inprocess")
    model = Recorder(fan_out(call), explorer())
    async with Supervisor(IN_MEMORY) as sup:
        await sup.orchestrate("Go.", model=model, workspace=workspace)
    out = model.task_output("c1")
    assert out["status"] == "error" and "unknown agent type" in out["message"]

    model = Recorder(fan_out(call), explorer("looked in-process"))
    finished: list[Event] = []
    async with Supervisor(IN_MEMORY) as sup:
        sup.subscribe(lambda e: finished.append(e) if isinstance(e, RunFinished) else None)
        got = await sup.orchestrate(
            "Go.", model=model, workspace=workspace, agent_types=["spawn", "inprocess"]
        )
    out = model.task_output("c1")
    assert out["status"] == "completed" and out["summary"] == "looked in-process"
    [record] = got.ledger.records
    assert record.provider == "inprocess"
    levels = {e.result.isolation.level for e in finished if e.result.isolation is not None}
    assert levels >= {"none"}


@pytest.mark.in_memory
async def test_agent_type_fork_seeds_the_sub_agent_with_the_orchestrators_turns(
    workspace: Path,
) -> None:
    call = task("c1", "explorer", "look", "Look again.", agentType="fork")
    model = Recorder(fan_out(call), explorer("forked"))
    async with Supervisor(IN_MEMORY) as sup:
        got = await sup.orchestrate("The original request.", model=model, workspace=workspace)
    assert got.success and model.task_output("c1")["summary"] == "forked"
    [sub] = model.runs("Role: explorer")
    sent = [m.content for m in sub[0].messages if m.role == "user"]
    assert sent[0] == "The original request." and sent[-1] == "Look again."
    assert got.ledger.records[0].provider == "fork"


async def test_an_acp_sub_agent_is_metered_into_the_ledger_through_the_gateway(
    workspace: Path,
) -> None:
    steps = [
        {
            "post": {
                "url": "$ANTHROPIC_BASE_URL/v1/messages",
                "headers": {"x-api-key": "$ANTHROPIC_API_KEY"},
                "body": {
                    "model": "x",
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": "q"}],
                },
            }
        },
        {"say": "the foreign agent is done"},
    ]
    foreign = SubagentDefinition(
        type="foreign", description="An ACP agent.", provider="scriptacp", read_only=True
    )
    model = Recorder(
        fan_out(task("c1", "foreign", "ask it", json.dumps(steps))),
        script("q", turn(text="an answer", tokens=33)),
    )
    async with Supervisor() as sup:
        from tether.parent.providers.acp_provider import AcpProvider

        sup.providers.register(
            AcpProvider("scriptacp", [sys.executable, str(ACP_AGENT)], summary="a test agent")
        )
        got = await sup.orchestrate(
            "Go.", model=model, workspace=workspace, definitions=[*builtin_registry(), foreign]
        )
    assert got.success, got.result
    out = model.task_output("c1")
    assert out["status"] == "completed" and out["summary"] == "the foreign agent is done"
    [record] = got.ledger.records
    assert record.provider == "scriptacp" and record.steps == 1
    assert record.usage.input_tokens == 33 and record.usage.output_tokens == 1
    # The orchestrator's model was offered the registered ACP provider too.
    assert "scriptacp" in orchestrator_tool(model)["properties"]["agentType"]["enum"]
