"""A follow-up to a continuable sub-agent is a delegated run like its task: it passes the same
gate (tree budget, admission, the parent's diff and the verifier, the ledger, the events), its
fix cycles go to the same session, and no verifier becomes a session of its own. Children in
memory (the in-memory tier), scripted models; the orchestrator's model is written in Python
because it has to read the agent id a task handed back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from book import Recorder, call, complete, script, turn

from tether.parent import Supervisor
from tether.parent.agents.tools import SEND_MESSAGE_SPEC
from tether.parent.delegation import Delegator, builtin_registry
from tether.parent.delegation.runner import SupervisorRunner
from tether.parent.process.config import ChildConfig
from tether.parent.run.spec import NamedModel
from tether.parent.run.subagent_events import SubagentCompleted, SubagentQueued, SubagentStarted
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

MODEL = "scripted:follow-ups"
"""The name the tests give the shared scripted model (what the ledger must bill)."""


def write(path: str, text: str = "x\n") -> dict[str, Any]:
    return call("write_file", path=path, content=text)


def two_activations_of_the_tester(*, tokens: int = 10) -> dict[str, Any]:
    """The tester's one run: A.md for its task; B, C and D for the follow-up (warm: the same
    run id walks on through the script)."""
    return script(
        "Role: tester",
        turn(write("A.md"), tokens=tokens),
        turn(complete("wrote A.md", "A.md"), tokens=tokens),
        turn(write("B.md"), write("C.md"), write("D.md"), tokens=tokens),
        turn(complete("wrote B, C and D", "B.md", "C.md", "D.md"), tokens=tokens),
    )


def verifier(verdict: str = "PASS") -> dict[str, Any]:
    return script(
        "Role: verifier",
        turn(call("read_file", path="B.md")),
        turn(complete(f"1. B.md, C.md and D.md exist.\nVERDICT: {verdict}")),
    )


class Orchestrator:
    """The orchestrator's model (its run id starts `orch-`): a `task` for the tester, then a
    `send_message` to the agent id the task handed back, then `complete`. Every other run is
    answered by `sub`."""

    def __init__(self, sub: Recorder, follow_up: str) -> None:
        self.sub = sub
        self.follow_up = follow_up
        self.results: list[dict[str, Any]] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        if not params.run_id.startswith("orch-"):
            return await self.sub.complete(params)
        self.results = [json.loads(m.content) for m in params.messages if m.role == "tool"]
        if not self.results:
            args = {"subagent_type": "tester", "description": "write A", "prompt": "Write A.md."}
            step = ToolCall(id="c1", name="task", arguments=args)
        elif len(self.results) == 1:
            agent_id = self.results[0]["subagentId"]
            step = ToolCall(
                id="c2",
                name="send_message",
                arguments={"agent_id": agent_id, "message": self.follow_up},
            )
        else:
            step = ToolCall(id="c3", name="complete", arguments={"summary": "done"})
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="", tool_calls=[step]),
            usage=Usage(input_tokens=10, output_tokens=1),
        )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.mark.in_memory
async def test_a_follow_up_is_diffed_verified_counted_and_recorded_like_a_task(
    tmp_path: Path, workspace: Path
) -> None:
    sub = Recorder(two_activations_of_the_tester(), verifier("PASS"))
    model = Orchestrator(sub, "Now write B.md, C.md and D.md.")
    seen: list[Any] = []
    async with Supervisor(IN_MEMORY, state_dir=tmp_path / "state") as sup:
        got = await sup.orchestrate(
            "Write the notes.",
            model=NamedModel(MODEL, model),
            workspace=workspace,
            continuable=True,
            keep_alive=30,
            token_budget=100_000,
            on_event=seen.append,
        )
        agents = await sup.list_agents(parent_run=got.result.run_id)
    assert got.success, got.result
    task_out, follow_out = model.results
    agent_id = task_out["subagentId"]
    assert agent_id.startswith("ag_") and follow_out["subagentId"] == agent_id
    # The follow-up's three-file change was measured by the parent and verified.
    assert sorted(follow_out["changedFiles"]) == ["B.md", "C.md", "D.md"]
    assert follow_out["verification"]["verdict"] == "PASS"
    records = got.ledger.records
    assert [(r.role, r.definition) for r in records] == [
        ("task", "tester"),
        ("follow_up", "tester"),
        ("verifier", "verifier"),
    ]
    # Ledger and sessions join on the agent id; the model billed is the one that served it.
    assert [r.agent_id for r in records] == [agent_id, agent_id, None]
    assert {r.model for r in records} == {MODEL}
    assert all(r.run_id for r in records)
    # Every sub-agent turn is in the ledger, and the ledger is what the session counted.
    [agent] = agents
    assert agent.id == agent_id
    sessions = agent.usage.input_tokens + agent.usage.output_tokens
    assert sum(r.usage.input_tokens + r.usage.output_tokens for r in records[:2]) == sessions
    # Each start says what the sub-agent was asked and which run carries it.
    starts = [e for e in seen if isinstance(e, SubagentStarted)]
    assert [(e.role, e.prompt) for e in starts[:2]] == [
        ("task", "Write A.md."),
        ("follow_up", "Now write B.md, C.md and D.md."),
    ]
    assert all(e.run_id for e in starts)
    assert starts[1].agent_id == agent_id
    assert [e.run_id for e in starts[:2]] == [r.run_id for r in records[:2]]


@pytest.mark.in_memory
async def test_a_verifier_and_its_fix_cycles_belong_to_the_task_sub_agent(
    tmp_path: Path, workspace: Path
) -> None:
    """Three files changed, the verifier answers FAIL, then PASS: the fix is a follow-up to the
    task's own agent, and neither verifier run is a session the orchestrator could message."""
    tester = script(
        "Role: tester",
        turn(write("B.md"), write("C.md"), write("D.md", "bad\n")),
        turn(complete("wrote B, C and D", "B.md")),
        turn(write("D.md", "good\n")),
        turn(complete("fixed D.md", "D.md")),
    )
    failing_then_passing = [
        script(
            "Role: verifier(?s:.*)fixed D.md",
            turn(complete("1. D.md is good now.\nVERDICT: PASS")),
        ),
        script("Role: verifier", turn(complete("1. D.md says bad.\nVERDICT: FAIL"))),
    ]
    sub = Recorder(tester, *failing_then_passing)
    async with Supervisor(IN_MEMORY, state_dir=tmp_path / "state") as sup:
        runner = SupervisorRunner(sup, default_model=NamedModel(MODEL, sub), keep_alive=30)
        runner.parent_run = "orch-fixes"
        delegator = Delegator(builtin_registry(), runner, workspace=workspace)
        out = await delegator.execute(
            {"subagent_type": "tester", "description": "notes", "prompt": "Write B, C, D."},
            tool_call_id="c1",
        )
        agents = await sup.list_agents(parent_run="orch-fixes")
    assert out.status == "completed", out
    assert out.verification is not None
    assert (out.verification.verdict, out.verification.fix_cycles) == ("PASS", 1)
    assert (workspace / "D.md").read_text() == "good\n"
    [agent] = agents  # the tester only: no verifier, no fix run of its own
    assert out.subagent_id == agent.id
    assert [(r.role, r.agent_id) for r in delegator.ledger.records] == [
        ("task", agent.id),
        ("verifier", None),
        ("fix", agent.id),
        ("verifier", None),
    ]
    # The fix went to the same child, warm: one run id for the task and the fix.
    task_run, fix_run = (r.run_id for r in delegator.ledger.records if r.role in ("task", "fix"))
    assert task_run == fix_run


@pytest.mark.in_memory
async def test_a_follow_up_once_the_tree_budget_is_spent_is_refused_before_it_runs(
    tmp_path: Path, workspace: Path
) -> None:
    sub = Recorder(two_activations_of_the_tester(tokens=100))
    async with Supervisor(IN_MEMORY, state_dir=tmp_path / "state") as sup:
        runner = SupervisorRunner(sup, default_model=NamedModel(MODEL, sub), keep_alive=30)
        delegator = Delegator(builtin_registry(), runner, workspace=workspace, token_budget=150)
        out = await delegator.execute(
            {"subagent_type": "tester", "description": "A", "prompt": "Write A.md."},
            tool_call_id="c1",
        )
        asked = len(sub.requests)
        send = delegator.message_tool(SEND_MESSAGE_SPEC)
        got = await send.call(
            ToolCallParams(
                run_id="orch",
                name="send_message",
                call_id="c2",
                arguments={"agent_id": out.subagent_id, "message": "Now B, C and D."},
            )
        )
    assert delegator.budget.exceeded()
    body = json.loads(got.content)
    assert got.is_error and body["error"] == "budget_spent"
    assert len(sub.requests) == asked  # the follow-up never reached the model
    assert not (workspace / "B.md").exists()
    assert [r.role for r in delegator.ledger.records] == ["task"]


@pytest.mark.in_memory
async def test_a_follow_up_that_passes_the_tree_budget_while_it_runs_is_cut(
    tmp_path: Path, workspace: Path
) -> None:
    """Its turns are reserved against the tree's budget by the parent's broker, like a task's:
    the turn that would pass it is refused, and the run ends `budget_exhausted`."""
    sub = Recorder(two_activations_of_the_tester(tokens=100))
    async with Supervisor(IN_MEMORY, state_dir=tmp_path / "state") as sup:
        runner = SupervisorRunner(sup, default_model=NamedModel(MODEL, sub), keep_alive=30)
        delegator = Delegator(builtin_registry(), runner, workspace=workspace, token_budget=300)
        out = await delegator.execute(
            {"subagent_type": "tester", "description": "A", "prompt": "Write A.md."},
            tool_call_id="c1",
        )
        assert out.status == "completed" and not delegator.budget.exceeded()
        follow = await delegator.follow_up(out.subagent_id, "Now B, C and D.", tool_call_id="c2")
    assert follow.status == "truncated" and follow.failure == "budget_exhausted"
    assert delegator.budget.spent <= 300 + 101  # at most the one turn in flight when it filled
    [task_record, follow_up] = delegator.ledger.records
    assert task_record.role == "task"
    assert follow_up.role == "follow_up" and follow_up.status == "truncated"
    assert follow_up.usage.input_tokens > 0


@pytest.mark.in_memory
async def test_a_follow_up_to_an_agent_this_delegation_did_not_start_is_refused(
    tmp_path: Path, workspace: Path
) -> None:
    async with Supervisor(IN_MEMORY, state_dir=tmp_path / "state") as sup:
        other = await sup.spawn_agent(
            "not yours",
            agent="explorer",
            workspace=workspace,
            model=Recorder(script(None, turn(complete("hi")))),
            keep_alive=0,
        )
        await other.result()
        runner = SupervisorRunner(sup, default_model=Recorder(), keep_alive=30)
        delegator = Delegator(builtin_registry(), runner, workspace=workspace)
        out = await delegator.follow_up(other.id, "hello", tool_call_id="c1")
    assert out.status == "error" and out.error == "unknown_agent"
    assert delegator.ledger.records == []


@pytest.mark.in_memory
async def test_completed_events_close_every_started_one(tmp_path: Path, workspace: Path) -> None:
    sub = Recorder(two_activations_of_the_tester(), verifier("PASS"))
    seen: list[Any] = []
    async with Supervisor(IN_MEMORY, state_dir=tmp_path / "state") as sup:
        runner = SupervisorRunner(sup, default_model=NamedModel(MODEL, sub), keep_alive=30)
        delegator = Delegator(builtin_registry(), runner, workspace=workspace, on_event=seen.append)
        out = await delegator.execute(
            {"subagent_type": "tester", "description": "A", "prompt": "Write A.md."},
            tool_call_id="c1",
        )
        await delegator.follow_up(out.subagent_id, "Now B, C and D.", tool_call_id="c2")
    started = [(e.id, e.role) for e in seen if isinstance(e, SubagentStarted)]
    ended = [(e.id, e.role) for e in seen if isinstance(e, SubagentCompleted)]
    assert started == ended and len(started) == 3


@pytest.mark.in_memory
@pytest.mark.parametrize("keep_alive", [30.0, None], ids=["continuable", "one-shot"])
async def test_a_continuable_sub_agent_is_told_it_may_ask_and_a_one_shot_one_that_nobody_answers(
    tmp_path: Path, workspace: Path, keep_alive: float | None
) -> None:
    """What the sub-agent's model is sent: a continuable sub-agent has `ask_orchestrator` and
    its prompt says how a question is answered; a one-shot one is told nobody will answer."""
    sub = Recorder(script("Role: tester", turn(complete("nothing to do"))))
    async with Supervisor(IN_MEMORY, state_dir=tmp_path / "state") as sup:
        runner = SupervisorRunner(sup, default_model=NamedModel(MODEL, sub), keep_alive=keep_alive)
        delegator = Delegator(builtin_registry(), runner, workspace=workspace)
        out = await delegator.execute(
            {"subagent_type": "tester", "description": "look", "prompt": "Look around."},
            tool_call_id="c1",
        )
    assert out.status == "completed", out
    [[first, *_]] = sub.runs("Role: tester")
    system = "\n".join(m.content for m in first.messages if m.role == "system")
    tools = {t.name for t in first.tools}
    if keep_alive is None:
        assert "nobody will answer" in system
        assert "ask_orchestrator" not in tools
        assert "ask_orchestrator" not in system
    else:
        assert "nobody will answer" not in system
        assert "ask_orchestrator" in tools
        assert "call `ask_orchestrator` with your question" in system


@pytest.mark.in_memory
@pytest.mark.parametrize(
    ("waiting_for", "holder", "max_concurrent"),
    [
        ("slot", {"subagent_type": "explorer"}, 1),
        ("workspace", {"subagent_type": "general", "readOnly": False}, 4),
    ],
    ids=["cap", "writer"],
)
async def test_a_follow_up_waits_its_turn_under_the_cap_and_behind_a_writer_like_a_task(
    tmp_path: Path,
    workspace: Path,
    waiting_for: str,
    holder: dict[str, Any],
    max_concurrent: int,
) -> None:
    """A sibling holds the only slot (`max_concurrent=1`), or the workspace (a build sub-agent
    at work): the follow-up to the tester is queued with its position and starts after it."""
    sub = Recorder(
        script(
            "Role: tester",
            turn(write("A.md")),
            turn(complete("wrote A.md", "A.md")),
            turn(write("B.md")),
            turn(complete("wrote B.md", "B.md")),
        ),
        script("Role: (explorer|general)", turn(complete("looked around"), delay=2.0)),
    )
    seen: list[Any] = []
    async with Supervisor(IN_MEMORY, state_dir=tmp_path / "state") as sup:
        runner = SupervisorRunner(sup, default_model=NamedModel(MODEL, sub), keep_alive=30)
        delegator = Delegator(
            builtin_registry(),
            runner,
            workspace=workspace,
            max_concurrent=max_concurrent,
            on_event=seen.append,
        )
        out = await delegator.execute(
            {"subagent_type": "tester", "description": "A", "prompt": "Write A.md."},
            tool_call_id="c1",
        )
        follow: list[Any] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:

                async def hold() -> None:
                    args = {**holder, "description": "hold", "prompt": "Look around."}
                    await delegator.execute(args, tool_call_id="c2")

                tg.start_soon(hold)
                while not any(
                    isinstance(e, SubagentStarted) and e.tool_call_id == "c2" for e in seen
                ):
                    await anyio.sleep(0.01)
                follow.append(
                    await delegator.follow_up(out.subagent_id, "Now B.md.", tool_call_id="c3")
                )
    [done] = follow
    assert done.status == "completed", done
    [queued] = [e for e in seen if isinstance(e, SubagentQueued)]
    assert (queued.tool_call_id, queued.position, queued.waiting_for) == ("c3", 1, waiting_for)
    order = [
        (type(e).__name__, e.tool_call_id)
        for e in seen
        if isinstance(e, SubagentStarted | SubagentCompleted) and e.tool_call_id in ("c2", "c3")
    ]
    assert order.index(("SubagentStarted", "c3")) > order.index(("SubagentCompleted", "c2"))
