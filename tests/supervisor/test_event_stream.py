"""The supervisor's event stream is bounded: a consumer that falls behind loses the oldest
progress events (counted), never a run's start or end. One event bus serves a local supervisor
and a Ray placement alike."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tether.parent import (
    ChildConfig,
    ChildEvent,
    EventStream,
    RunFinished,
    RunStarted,
    ScriptedModel,
    Supervisor,
)
from tether.parent.run.events import Event, EventBus
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio


def progress(seq: int) -> ChildEvent:
    return ChildEvent("r", seq, "step", {})


async def test_past_the_buffer_the_oldest_progress_events_are_dropped_and_counted() -> None:
    stream = EventStream(buffer=3)
    started = RunStarted("r", 1, ())
    finished = RunFinished("r", RunResult(success=True, status="completed"))
    stream.put(started)
    for seq in range(10):
        stream.put(progress(seq))
    stream.put(finished)
    stream.close()
    got = [ev async for ev in stream]
    assert got == [started, progress(9), finished]  # three events in all, the newest progress
    assert stream.dropped == 9


async def test_lifecycle_events_are_kept_even_when_they_alone_fill_the_buffer() -> None:
    stream = EventStream(buffer=2)
    events = [RunStarted(f"r{i}", i, ()) for i in range(5)]
    for ev in events:
        stream.put(ev)
    stream.close()
    assert [ev async for ev in stream] == events
    assert stream.dropped == 0


@pytest.mark.in_memory
async def test_a_consumer_that_never_reads_holds_at_most_the_buffer(tmp_path: Path) -> None:
    turns = ",".join('{"text": "t"}' for _ in range(30))
    async with Supervisor(ChildConfig(transport="memory")) as sup, sup.events(buffer=5) as stream:
        for _ in range(3):
            await sup.run(
                "go",
                workspace=tmp_path,
                model=ScriptedModel.from_json(f"[{turns}]"),
            )
        got = []
        with anyio.fail_after(5):
            async for ev in stream:
                got.append(ev)
                if len([e for e in got if isinstance(e, RunFinished)]) == 3:
                    break
    assert sum(isinstance(e, RunStarted) for e in got) == 3
    assert sum(isinstance(e, ChildEvent) for e in got) <= 5
    assert stream.dropped > 0


async def test_a_sub_agents_start_and_end_are_kept_while_its_progress_and_queue_places_drop() -> (
    None
):
    from tether.parent.run.subagent_events import (
        SubagentCompleted,
        SubagentProgress,
        SubagentQueued,
        SubagentStarted,
    )

    def relayed(seq: int) -> SubagentProgress:
        return SubagentProgress(
            "sa-1", "explorer", "look", "step", {"iteration": seq}, seq, None, 0.0, 0
        )

    stream = EventStream(buffer=3)
    queued = [SubagentQueued("sa-1", "explorer", "look", "c1", n, "slot", 1) for n in (2, 1)]
    started = SubagentStarted("sa-1", "explorer", "look", "c1", "task", True)
    completed = SubagentCompleted(
        "sa-1", "explorer", "look", "c1", "task", True, "completed", "", "run-9"
    )
    for ev in [*queued, started, *(relayed(seq) for seq in range(6)), completed]:
        stream.put(ev)
    stream.close()
    got = [ev async for ev in stream]
    assert got == [started, relayed(5), completed]
    assert stream.dropped == 2 + 5


async def test_a_listener_that_raises_is_skipped_and_every_other_one_still_hears() -> None:
    bus = EventBus()
    heard: list[Event] = []
    own: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("a listener's own bug")

    bus.subscribe(broken)
    unsubscribe = bus.subscribe(heard.append)
    async with bus.events() as stream:
        bus.publish(progress(1), own.append)
        unsubscribe()
        bus.publish(progress(2))
        stream.close()
        streamed = [ev async for ev in stream]
    assert own == [progress(1)] and heard == [progress(1)]
    assert streamed == [progress(1), progress(2)]


@pytest.mark.parametrize("owner", ["bus", "placement"])
async def test_the_event_buffer_an_owner_was_given_bounds_its_events(owner: str) -> None:
    # A placement's `event_buffer` bounded its nodes' batches but not its own `events()`.
    from tether.parent.placement import RayPlacement

    bus = RayPlacement(event_buffer=2) if owner == "placement" else EventBus(2)
    async with bus.events() as stream:
        for seq in range(5):
            bus.publish(progress(seq))
        stream.close()
        got = [ev async for ev in stream]
    assert got == [progress(3), progress(4)] and stream.dropped == 3
