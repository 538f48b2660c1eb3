"""The placement's parts that need no cluster: the driver's answers to forwarded requests, a
host's requests waiting for the driver, a host's event batches, engine failures as results,
and that nothing imports Ray unless a placement is used."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest

from tether.parent.placement.lost import engine_failure, lost_result, unplaced_result
from tether.parent.placement.nodehost import DriverAsks, EventBatcher
from tether.parent.placement.relay import DriverBroker, RunContext, forwarding_error
from tether.parent.placement.wire import Answer, Ask
from tether.parent.run.broker import Brokered, ParentTool, RunModels
from tether.parent.run.events import ChildEvent, RunFinished, RunStarted
from tether.protocol import ErrorCode
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolApproveParams,
    ToolApproveResult,
    ToolCallParams,
    ToolCallResult,
    ToolSpec,
    Usage,
)

pytestmark = pytest.mark.anyio


class Echo:
    def __init__(self, text: str) -> None:
        self.text = text
        self.seen: list[ModelCompleteParams] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.seen.append(params)
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content=self.text),
            usage=Usage(input_tokens=5, output_tokens=2),
        )


class Broken:
    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        raise ConnectionError("sk-secret-in-a-traceback")


def ask(method: str, params: object, run_id: str = "r1", id: int = 1) -> Ask:
    return Ask(id, run_id, method, params)


def turn(model: str | None = None, purpose: str = "turn") -> ModelCompleteParams:
    return ModelCompleteParams(
        run_id="r1", messages=[ChatMessage(role="user", content="hi")], model=model, purpose=purpose
    )  # type: ignore[arg-type]


async def test_the_driver_selects_the_run_s_own_model_and_counts_what_it_served() -> None:
    main, compaction = Echo("main"), Echo("compaction")
    turns: list[str] = []

    async def on_turn(p: ModelCompleteParams, r: ModelCompleteResult) -> None:
        turns.append(r.message.content)

    broker = DriverBroker()
    ctx = RunContext(RunModels(main, "m", compaction, "c"), on_turn=on_turn)
    broker.runs["r1"] = ctx
    got = await broker.answer(ask("model/complete", turn()))
    assert got.result.message.content == "main"
    got = await broker.answer(ask("model/complete", turn(purpose="compaction")))
    assert got.result.message.content == "compaction"
    refused = await broker.answer(ask("model/complete", turn(model="evil:http://x")))
    assert refused.error is not None and refused.error[0] == ErrorCode.NO_MODEL
    assert turns == ["main"]  # told of turns only, before the node hears the answer
    assert (ctx.brokered.model_calls, ctx.brokered.turns, ctx.brokered.usage.input_tokens) == (
        2,
        1,
        10,
    )


async def test_an_unknown_run_is_refused_and_a_failing_provider_leaks_nothing() -> None:
    broker = DriverBroker()
    unknown = await broker.answer(ask("model/complete", turn(), run_id="nobody"))
    assert unknown.error is not None and "nobody" in unknown.error[1]
    broker.runs["r1"] = RunContext(RunModels(Broken()))
    failed = await broker.answer(ask("model/complete", turn()))
    assert failed.error == (ErrorCode.MODEL_ERROR, "the model provider failed: ConnectionError")
    error = forwarding_error(failed)
    assert error is not None and error.code == ErrorCode.MODEL_ERROR
    assert forwarding_error(Answer(1, result=None)) is None


async def test_approvals_and_parent_tools_are_answered_by_the_run_s_own_policy_and_tools() -> None:
    def deny(p: ToolApproveParams) -> ToolApproveResult:
        return ToolApproveResult(allow=False, reason=f"no {p.tool}")

    async def call(p: ToolCallParams) -> ToolCallResult:
        return ToolCallResult(content=f"called {p.name}")

    tool = ParentTool(ToolSpec(name="lookup"), call)
    broker = DriverBroker()
    broker.runs["r1"] = RunContext(RunModels(), approve=deny, tools={"lookup": tool})
    approve = ToolApproveParams(run_id="r1", tool="bash", arguments={})
    got = await broker.answer(ask("tool/approve", approve))
    assert got.result == ToolApproveResult(allow=False, reason="no bash")
    called = await broker.answer(ask("tool/call", ToolCallParams(run_id="r1", name="lookup")))
    assert called.result.content == "called lookup"
    other = await broker.answer(ask("tool/call", ToolCallParams(run_id="r1", name="delegate")))
    assert other.error is not None and other.error[0] == ErrorCode.METHOD_NOT_FOUND
    broker.runs["r2"] = RunContext(RunModels())
    default = await broker.answer(ask("tool/approve", approve, run_id="r2"))
    assert default.result.allow


async def test_a_hosts_requests_go_out_in_their_runs_batches_and_each_answer_wakes_its_asker() -> (
    None
):
    asks = DriverAsks()
    events = EventBatcher(batch=10, buffer=2)
    ask = asks.for_run(events, "r1")
    answers: list[Answer] = []
    async with anyio.create_task_group() as tg:

        async def asker(i: int) -> None:
            answers.append(await ask("model/complete", i))

        for i in range(3):
            tg.start_soon(asker, i)
        await anyio.wait_all_tasks_blocked()
        for seq in range(5):  # progress past the buffer: dropped, the requests never
            events.put(ChildEvent("r1", seq, "step", {}))
        batch = await events.next_batch()
        sent = [e for e in batch if isinstance(e, Ask)]
        assert [(a.run_id, a.method, a.params) for a in sent] == [
            ("r1", "model/complete", i) for i in range(3)
        ]
        assert asks.waiting() == 3
        asks.answer([Answer(999, result="unknown: dropped")])
        asks.answer([Answer(a.id, result=a.params * 10) for a in reversed(sent)])
    assert sorted(a.result for a in answers) == [0, 10, 20]
    assert asks.waiting() == 0


async def test_a_request_whose_asker_is_cancelled_is_forgotten_and_its_late_answer_dropped() -> (
    None
):
    asks = DriverAsks()
    events = EventBatcher(batch=10, buffer=10)
    ask = asks.for_run(events, "r1")
    with anyio.move_on_after(0.05) as scope:
        await ask("tool/approve", None)
    assert scope.cancelled_caught
    assert asks.waiting() == 0
    [sent] = await events.next_batch()
    assert isinstance(sent, Ask)
    asks.answer([Answer(sent.id, result="late")])  # nobody waits: dropped, no error
    assert asks.waiting() == 0


async def test_a_host_batches_events_and_drops_only_progress_when_the_driver_falls_behind() -> None:
    result = RunResult(success=True, status="completed")
    batcher = EventBatcher(batch=3, buffer=4)
    batcher.put(RunStarted("r", 1, ("x",)))
    for seq in range(10):
        batcher.put(ChildEvent("r", seq, "step", {}))
    batcher.put(RunFinished("r", result))
    got = []
    while not batcher.finished:
        batch = await batcher.next_batch()
        assert 1 <= len(batch) <= 3
        got += batch
    assert isinstance(got[0], RunStarted) and isinstance(got[-1], RunFinished)
    assert [e.seq for e in got if isinstance(e, ChildEvent)] == [8, 9]
    assert batcher.dropped == 8


def test_engine_failures_read_as_sentences_naming_the_node_and_the_last_rung() -> None:
    class ActorDiedError(Exception):
        pass

    class ActorUnavailableError(ActorDiedError):
        pass

    assert engine_failure(ActorDiedError()) == "its host actor died (ActorDiedError)"
    assert "unreachable" in engine_failure(ActorUnavailableError())
    assert engine_failure(KeyError()) == "the engine failed (KeyError)"
    counted = Brokered(turns=2, input_tokens=30, output_tokens=4)
    lost = lost_result(
        "r1",
        node="abc123 (host)",
        why="its host actor died",
        rung=None,
        containment="cgroup2",
        brokered=counted,
        started=True,
    )
    assert not lost.success and lost.status == "error" and lost.failure is not None
    assert (lost.failure.kind, lost.failure.rung) == ("placement_lost", "none")
    assert "abc123 (host)" in lost.message and "'none'" in lost.message
    assert (lost.iteration_count, lost.usage.input_tokens, lost.turn_count) == (2, 30, 1)
    cut = unplaced_result("r2", kind="cancelled", message="cancelled before it was placed")
    assert cut.status == "aborted" and cut.run_id == "r2" and cut.failure is not None


def test_nothing_imports_ray_unless_a_placement_is_entered() -> None:
    code = (
        "import json, sys\n"
        "import tether.parent, tether.parent.cli.main, tether.parent.placement\n"
        "from tether.parent.placement import RayPlacement\n"
        "from tether.parent.placement import nodehost, relay, policy, lost\n"
        "RayPlacement(nodes='all', per_node=2)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'ray')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(out.stdout) == []


async def test_bad_usage_is_refused_before_anything_is_placed() -> None:
    from tether.parent import ChildConfig
    from tether.parent.placement import RayPlacement

    with pytest.raises(ValueError, match="stacks on the local or bwrap launcher"):
        RayPlacement(ChildConfig(launcher="prlimit"))
    RayPlacement(ChildConfig(launcher="prlimit"), contain="none")  # as is: allowed
    for bad in ({"per_node": 0}, {"when_full": "drop"}, {"contain": "vm"}):
        with pytest.raises(ValueError):
            RayPlacement(**bad)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="async with"):
        await RayPlacement().start("x")
