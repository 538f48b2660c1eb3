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
from tether.parent.agents.tools import SEND_MESSAGE_SPEC, agent_tools
from tether.parent.process.config import ChildConfig
from tether.parent.run.broker import ParentTool
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    ToolCallParams,
    Usage,
)

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""


async def call(tool: ParentTool, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    got = await tool.call(
        ToolCallParams(run_id="orchestrator", name=tool.spec.name, arguments=arguments)
    )
    body = json.loads(got.content)
    assert isinstance(body, dict)
    return got.is_error, body


@pytest.mark.in_memory
async def test_mistakes_and_refusals_are_error_results_naming_the_problem(
    state: Path, workspace: Path
) -> None:
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
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


@pytest.mark.in_memory
async def test_a_message_through_the_tool_is_the_agents_answer_and_the_listing_shows_it(
    state: Path, workspace: Path
) -> None:
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
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


@pytest.mark.in_memory
async def test_a_spent_budget_is_an_error_result(state: Path, workspace: Path) -> None:
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
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


@pytest.mark.in_memory
async def test_an_orchestrators_model_answers_its_sub_agent_through_the_tools(
    state: Path, workspace: Path
) -> None:
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
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


@pytest.mark.in_memory
async def test_the_delegation_runner_makes_a_task_sub_agent_continuable(
    state: Path, workspace: Path
) -> None:
    from tether.parent.delegation import Delegator, builtin_registry
    from tether.parent.delegation.runner import SupervisorRunner

    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        runner = SupervisorRunner(sup, default_model=Commanded(), keep_alive=30, parent_run="orch")
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
        send = delegator.message_tool(SEND_MESSAGE_SPEC)
        is_error, answer = await call(send, agent_id=out.subagent_id, message="one level")
        assert not is_error and answer["status"] == "completed"
        assert answer["summary"].endswith("| one level")
        assert answer["subagentId"] == out.subagent_id  # the same session holds the answer
        roles = [(r.role, r.agent_id) for r in delegator.ledger.records]
        assert roles == [("task", out.subagent_id), ("follow_up", out.subagent_id)]
        [summary] = await sup.list_agents(parent_run="orch")
        assert summary.label == "survey" and summary.activations == 1  # it went warm


class Orchestrating:
    """The orchestrator's model (its run id starts `orch-`): start an explorer that asks a
    question, answer it with `send_message`, then complete with what the sub-agent said.
    Every other run (the sub-agent) is answered by `Commanded`."""

    def __init__(self) -> None:
        self.sub = Commanded()
        self.tool_results: list[dict[str, Any]] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        if not params.run_id.startswith("orch-"):
            return await self.sub.complete(params)
        results = [json.loads(m.content) for m in params.messages if m.role == "tool"]
        self.tool_results = results
        if not results:
            call = ToolCall(
                id="o1",
                name="task",
                arguments={
                    "subagent_type": "explorer",
                    "description": "survey",
                    "prompt": "survey the notes ASK how deep?",
                },
            )
        elif len(results) == 1:
            agent_id = results[0]["subagentId"]
            call = ToolCall(
                id="o2",
                name="send_message",
                arguments={"agent_id": agent_id, "message": "one level"},
            )
        else:
            call = ToolCall(id="o3", name="complete", arguments={"summary": results[-1]["summary"]})
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="", tool_calls=[call]),
            usage=Usage(input_tokens=10, output_tokens=5),
        )


@pytest.mark.in_memory
async def test_a_continuable_orchestration_lets_its_model_answer_a_sub_agent_that_asked(
    state: Path, workspace: Path
) -> None:
    model = Orchestrating()
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        got = await sup.orchestrate(
            "survey the workspace",
            model=model,
            workspace=workspace,
            continuable=True,
            keep_alive="30s",
        )
        assert got.success, got.result.message
        [task] = got.tasks
        assert task.output.status == "needs_input" and task.output.question == "how deep?"
        assert task.output.subagent_id.startswith("ag_")
        asked, answered = model.tool_results
        assert asked["status"] == "needs_input" and asked["subagentId"] == task.output.subagent_id
        assert answered["status"] == "completed" and answered["summary"].endswith("| one level")
        assert got.result.summary == answered["summary"]
        # The agent belongs to this orchestration: its parent run is the orchestrator's run id,
        # and it went on warm in the same child (one activation on record).
        [summary] = await sup.list_agents(parent_run=got.result.run_id)
        assert summary.id == task.output.subagent_id and summary.activations == 1
    # The orchestration is over and its supervisor closed: the session is still on disk, so
    # a new supervisor resumes the agent cold.
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        again = await sup.send_message(
            task.output.subagent_id, "and the next level", model=model.sub
        )
        assert again.success and again.summary.endswith("| and the next level")


@pytest.mark.in_memory
async def test_only_a_continuable_orchestration_offers_its_model_the_agent_tools(
    workspace: Path, state: Path
) -> None:
    offered: dict[bool, set[str]] = {}

    class Looks:
        def __init__(self, continuable: bool) -> None:
            self.continuable = continuable

        async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
            offered[self.continuable] = {t.name for t in params.tools}
            done = ToolCall(id="c", name="complete", arguments={"summary": "looked"})
            return ModelCompleteResult(
                message=ChatMessage(role="assistant", content="", tool_calls=[done]),
                usage=Usage(input_tokens=1, output_tokens=1),
            )

    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        for continuable in (False, True):
            got = await sup.orchestrate(
                "look", model=Looks(continuable), workspace=workspace, continuable=continuable
            )
            assert got.success
    assert {"task", "send_message", "list_agents"} <= offered[True]
    assert "task" in offered[False]
    assert not {"send_message", "list_agents"} & offered[False]


async def test_a_continuable_runner_runs_a_definition_of_another_provider_once(
    state: Path, workspace: Path
) -> None:
    from tether.parent.delegation import Delegator, Registry
    from tether.parent.delegation.runner import SupervisorRunner
    from tether.parent.roles.definitions import SubagentDefinition
    from tether.parent.run.provider import Provider, SubagentRun
    from tether.protocol.messages import RunResult

    class Once(Provider):
        """Drives its own agent, so runs it once."""

        name = "once-only"

        async def run(self, run: SubagentRun) -> RunResult | None:
            return RunResult(
                success=True, status="completed", summary=f"seen: {run.request.prompt}"
            )

    kept = SubagentDefinition(type="kept", description="continuable")
    once = SubagentDefinition(type="once", description="its own driver", provider="once-only")
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        sup.providers.register(Once())
        runner = SupervisorRunner(sup, default_model=Commanded(), keep_alive=30, parent_run="orch")
        delegator = Delegator(Registry([kept, once]), runner, workspace=workspace)
        outputs = {}
        for kind in ("kept", "once"):
            args = {"subagent_type": kind, "description": kind, "prompt": "look"}
            outputs[kind] = await delegator.execute(args, tool_call_id=kind)
        assert all(o.status == "completed" for o in outputs.values())
        assert outputs["kept"].subagent_id.startswith("ag_")
        assert not outputs["once"].subagent_id.startswith("ag_")
        [agent] = await sup.list_agents(parent_run="orch")
        assert agent.id == outputs["kept"].subagent_id
