"""`send_message` and `list_agents` as tools of an orchestrator's model: every mistake and every
refusal is a result the model reads, and a message that got through is the agent's answer; the
delegation runner makes the task tool's sub-agents continuable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_models import Commanded

from tether.parent import Supervisor
from tether.parent.agent_tools import agent_tools, continuable_runner
from tether.parent.broker import ParentTool
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    ToolCallParams,
    Usage,
)

pytestmark = pytest.mark.anyio


async def call(tool: ParentTool, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    got = await tool.call(
        ToolCallParams(run_id="orchestrator", name=tool.spec.name, arguments=arguments)
    )
    body = json.loads(got.content)
    assert isinstance(body, dict)
    return got.is_error, body


async def test_mistakes_and_refusals_are_error_results_naming_the_problem(
    state: Path, workspace: Path
) -> None:
    async with Supervisor(state_dir=state) as sup:
        send, listing = agent_tools(sup.agents, parent_run="orch-1")
        theirs = await sup.spawn_agent(
            "not yours",
            agent="explorer",
            workspace=workspace,
            model=Commanded(),
            parent_run="orch-2",
            keep_alive=0,
        )
        await theirs.result()
        cases = {
            "garbled": {"agent_id": "ag_'; DROP TABLE agents; --", "message": "hi"},
            "unknown": {"agent_id": "ag_" + "1" * 20, "message": "hi"},
            "not yours": {"agent_id": theirs.id, "message": "hi"},
            "no message": {"agent_id": theirs.id},
            "blank": {"agent_id": theirs.id, "message": "  "},
            "a number": {"agent_id": 7, "message": "hi"},
            "an extra": {"agent_id": theirs.id, "message": "hi", "urgent": True},
        }
        got = {name: await call(send, **args) for name, args in cases.items()}
        assert all(is_error for is_error, _ in got.values())
        assert {name: body["error"] for name, (_, body) in got.items()} == {
            "garbled": "invalid_arguments",
            "unknown": "unknown_agent",
            "not yours": "unknown_agent",
            "no message": "invalid_arguments",
            "blank": "invalid_arguments",
            "a number": "invalid_arguments",
            "an extra": "invalid_arguments",
        }
        assert "agent_id: expected a string" in got["a number"][1]["message"]
        assert "'urgent' is not an argument" in got["an extra"][1]["message"]
        assert "not an agent id" in got["garbled"][1]["message"]
        bad_status = await call(listing, status="sleeping")
        assert bad_status[0] and bad_status[1]["error"] == "invalid_arguments"
        # Nothing of the other orchestration's agent was touched.
        [other] = await sup.list_agents()
        assert other.activations == 1 and other.message_count == 3


async def test_a_message_through_the_tool_is_the_agents_answer_and_the_listing_shows_it(
    state: Path, workspace: Path
) -> None:
    async with Supervisor(state_dir=state) as sup:
        send, listing = agent_tools(sup.agents, parent_run="orch-1")
        agent = await sup.spawn_agent(
            "plan it ASK which module first?",
            agent="explorer",
            workspace=workspace,
            model=Commanded(),
            parent_run="orch-1",
            label="planner",
        )
        await agent.result()
        is_error, listed = await call(listing)
        assert not is_error and listed["count"] == 1
        [entry] = listed["agents"]
        assert entry["agentId"] == agent.id and entry["status"] == "needs_input"
        assert (entry["type"], entry["label"]) == ("explorer", "planner")
        assert entry["question"] == "which module first?"
        assert entry["usage"] == {"inputTokens": 10, "outputTokens": 5}

        is_error, answer = await call(send, agent_id=f" {agent.id} ", message="the parser")
        assert not is_error
        assert answer["agentId"] == agent.id and answer["status"] == "completed"
        assert answer["summary"] == "seen: plan it ASK which module first? | the parser"
        assert (await call(listing, status="needs_input"))[1]["count"] == 0
        assert (await call(listing, status="idle"))[1]["agents"][0]["agentId"] == agent.id


async def test_a_spent_budget_is_an_error_result(state: Path, workspace: Path) -> None:
    async with Supervisor(state_dir=state) as sup:
        send, _ = agent_tools(sup.agents)
        agent = await sup.spawn_agent(
            "one", agent="explorer", workspace=workspace, model=Commanded(), token_total=15
        )
        await agent.result()
        is_error, body = await call(send, agent_id=agent.id, message="two")
        assert is_error and body["error"] == "budget_spent"
        assert "total budget of 15" in body["message"]


async def test_an_agent_busy_in_another_process_is_an_error_result(hosts: Any, state: Path) -> None:
    host = hosts.start()
    host.ask(op="spawn", prompt="first", keepAlive=60)
    agent_id = host.answer()["id"]
    async with Supervisor(state_dir=state) as sup:
        send, _ = agent_tools(sup.agents, model=Commanded())
        is_error, body = await call(send, agent_id=agent_id, message="hello")
    assert is_error and body["error"] == "busy"
    assert f"owner pid {host.proc.pid}" in body["message"]
    assert host.finish() == 0


class Orchestrator:
    """An orchestrator's model: lists its agents, answers the one that asks, then completes
    with what it heard."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        last = params.messages[-1]
        if last.role == "user":
            calls = [ToolCall(id="l1", name="list_agents", arguments={"status": "needs_input"})]
        else:
            self.seen.append(last.content)
            body = json.loads(last.content)
            if "agents" in body:
                who = body["agents"][0]["agentId"]
                calls = [
                    ToolCall(
                        id="s1",
                        name="send_message",
                        arguments={"agent_id": who, "message": "use tabs"},
                    )
                ]
            else:
                calls = [ToolCall(id="c1", name="complete", arguments={"summary": body["summary"]})]
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", tool_calls=calls), usage=Usage()
        )


async def test_an_orchestrators_model_answers_its_sub_agent_through_the_tools(
    state: Path, workspace: Path
) -> None:
    async with Supervisor(state_dir=state) as sup:
        sub = await sup.spawn_agent(
            "format ASK tabs or spaces?",
            agent="explorer",
            workspace=workspace,
            model=Commanded(),
            parent_run="orch",
        )
        await sub.result()
        orchestrator = Orchestrator()
        result = await sup.run(
            "get the formatting done",
            agent="explorer",
            workspace=workspace,
            model=orchestrator,
            parent_tools=agent_tools(sup.agents, parent_run="orch"),
        )
    assert result.success
    assert result.summary == "seen: format ASK tabs or spaces? | use tabs"
    listed = json.loads(orchestrator.seen[0])
    assert listed["agents"][0]["question"] == "tabs or spaces?"


async def test_the_delegation_runner_makes_a_task_sub_agent_continuable(
    state: Path, workspace: Path
) -> None:
    from tether.parent.delegation import Delegator, builtin_registry

    async with Supervisor(state_dir=state) as sup:
        runner = continuable_runner(sup.agents, parent_run="orch", model=Commanded(), keep_alive=30)
        delegator = Delegator(builtin_registry(), runner, workspace=workspace)
        out = await delegator.execute(
            {
                "subagent_type": "explorer",
                "description": "survey",
                "prompt": "survey the notes ASK how deep?",
            },
            tool_call_id="call-1",
        )
        assert out.status == "needs_input" and out.question == "how deep?"
        assert out.subagent_id.startswith("ag_")
        send, _ = agent_tools(sup.agents, parent_run="orch")
        is_error, answer = await call(send, agent_id=out.subagent_id, message="one level")
        assert not is_error and answer["status"] == "completed"
        assert answer["summary"].endswith("| one level")
        [summary] = await sup.list_agents(parent_run="orch")
        assert summary.label == "survey" and summary.activations == 1  # it went warm
