"""The child's one heartbeat task (`tether.child.heartbeats`): every wait of every run beats
while it lasts and stops when it ends, and no wait costs a task of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from tether.child.heartbeats import Heartbeats

pytestmark = pytest.mark.anyio

PERIOD = 0.05


class Recorder:
    def __init__(self) -> None:
        self.beats: list[dict[str, Any]] = []

    async def emit(self, kind: Any, data: Mapping[str, Any] | None = None) -> None:
        assert kind == "heartbeat"
        self.beats.append(dict(data or {}))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_long_wait_beats_every_period_and_a_short_one_never() -> None:
    beats = Heartbeats(PERIOD)
    slow, quick = Recorder(), Recorder()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(beats.run)
            async with beats.waiting(slow, "model"):
                for _ in range(20):
                    async with beats.waiting(quick, "tool:read_file"):
                        await anyio.lowlevel.checkpoint()  # far shorter than a period
                await anyio.sleep(PERIOD * 6.5)
            ended = len(slow.beats)
            await anyio.sleep(PERIOD * 3)
            tg.cancel_scope.cancel()
    assert quick.beats == []
    assert 3 <= ended <= 7, slow.beats
    assert len(slow.beats) == ended  # nothing after the wait ended
    assert {b["waitingFor"] for b in slow.beats} == {"model"}
    elapsed = [b["elapsedSeconds"] for b in slow.beats]
    assert elapsed == sorted(elapsed) and elapsed[0] >= round(PERIOD, 1)


async def test_overlapping_waits_of_two_runs_each_beat() -> None:
    beats = Heartbeats(PERIOD)
    one, two = Recorder(), Recorder()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(beats.run)

            async def wait(who: Recorder, what: str) -> None:
                async with beats.waiting(who, what):
                    await anyio.sleep(PERIOD * 4.5)

            tg.start_soon(wait, one, "model")
            await anyio.sleep(PERIOD / 2)
            tg.start_soon(wait, two, "approval")
            await anyio.sleep(PERIOD * 6)
            tg.cancel_scope.cancel()
    assert one.beats and {b["waitingFor"] for b in one.beats} == {"model"}
    assert two.beats and {b["waitingFor"] for b in two.beats} == {"approval"}


async def test_a_wait_starts_no_task() -> None:
    beats = Heartbeats(PERIOD)
    who = Recorder()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(beats.run)
            await anyio.lowlevel.checkpoint()
            before = len(asyncio.all_tasks())
            async with beats.waiting(who, "model"):
                during = len(asyncio.all_tasks())
            tg.cancel_scope.cancel()
    assert during == before
