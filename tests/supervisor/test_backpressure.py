"""A child cannot make the parent start unbounded work: its model requests are served a few at
once."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tether.parent.process.limits import Limits
from tether.parent.run.broker import MAX_MODEL_CALLS
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
)

CHILDREN = Path(__file__).resolve().parent.parent / "children"


class CountingModel:
    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.now += 1
        self.peak = max(self.peak, self.now)
        await anyio.sleep(0.002)
        self.now -= 1
        return ModelCompleteResult(message=ChatMessage(role="assistant", content="ok"))


@pytest.mark.anyio
async def test_a_flood_of_requests_is_answered_in_full_but_never_more_than_the_cap_at_once(
    tmp_path: Path,
) -> None:
    model = CountingModel()
    async with Supervisor() as sup:
        result = await sup.run(
            "go",
            workspace=tmp_path,
            model=model,
            command=[sys.executable, "-I", str(CHILDREN / "request_flood.py")],
            # every request of the flood is a turn: the parent enforces the turn budget too
            agent=AgentDefinition(type="general", max_iterations=500),
        )
    assert result.success, result
    assert result.summary == "200 answers"
    assert 1 < model.peak <= MAX_MODEL_CALLS


class BigAnswers:
    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        return ModelCompleteResult(message=ChatMessage(role="assistant", content="x" * 4096))


@pytest.mark.anyio
async def test_a_child_that_floods_requests_and_stops_reading_is_idle_not_busy(
    tmp_path: Path,
) -> None:
    # The answers fill the child's stdin pipe and the parent's writes wait on it: that is the
    # child's stall, so the idle clock runs and the run ends `unresponsive`.
    async with Supervisor() as sup:
        with anyio.fail_after(30):
            result = await sup.run(
                "go",
                workspace=tmp_path,
                model=BigAnswers(),
                command=[sys.executable, "-I", str(CHILDREN / "flood_then_deaf.py")],
                agent=AgentDefinition(type="general", max_iterations=1000),
                limits=Limits(idle="1s"),
            )
    assert result.failure is not None and result.failure.kind == "unresponsive", result
