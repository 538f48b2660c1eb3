"""The gateway's budgets are reserved when a call is admitted and settled when it is answered
(issue 30, break 3, the gateway's part): calls sent together over real loopback HTTP never get
more through than calls sent one by one — a grant's own token budget, a turn or token budget
it shares with other grants, and a run's budgets behind its broker (the `acp` provider's
grants)."""

from __future__ import annotations

import random

import anyio
import msgspec
import pytest
from gateway_kit import client, small_body
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.parent.gateway import Gateway, Grant
from tether.parent.providers.acp_provider import BrokeredModel
from tether.parent.run.broker import Broker, RunModels
from tether.parent.run.budget import Budget
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    Usage,
)


class Jittery:
    """Answers after a random number of checkpoints (or `delay` seconds), at a fixed cost; its
    output allowance (`max_tokens`) is that cost, so the parent's estimate covers it."""

    def __init__(self, seed: int, cost: int, delay: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.cost = cost
        self.max_tokens = cost
        self.delay = delay
        self.answered = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        if self.delay:
            await anyio.sleep(self.delay)
        for _ in range(self.rng.randrange(0, 8)):
            await anyio.lowlevel.checkpoint()
        self.answered += 1
        half = self.cost // 2
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="ok"),
            usage=Usage(input_tokens=half, output_tokens=self.cost - half),
            stop_reason="end_turn",
        )


def _outcome(status: int, text: str, stream: bool) -> str:
    """`answered`, `refused` (a spent budget: 402, or its error event in a stream) or what
    else came back."""
    if not stream:
        return {200: "answered", 402: "refused"}.get(status, f"status {status}: {text[:200]}")
    if status == 402:
        return "refused"
    if "event: message_stop" in text:
        return "answered"
    if "billing_error" in text:
        return "refused"
    return f"stream {status}: {text[:200]}"


async def _flood(gw: Gateway, grant: Grant, n: int, seed: int, streams: bool) -> list[str]:
    """`n` calls at once with the grant's token, each after a random number of checkpoints,
    some streaming (when `streams`)."""
    rng = random.Random(seed)
    plan = [(rng.randrange(0, 4), streams and rng.random() < 0.5) for _ in range(n)]
    outcomes: list[str] = []
    async with client(gw.base_url) as c:

        async def one(pause: int, stream: bool) -> None:
            for _ in range(pause):
                await anyio.lowlevel.checkpoint()
            r = await c.post(
                "/v1/messages",
                content=msgspec.json.encode(small_body(stream=stream)),
                headers={"x-api-key": grant.token, "content-type": "application/json"},
            )
            outcomes.append(_outcome(r.status_code, r.text, stream))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for pause, stream in plan:
                    tg.start_soon(one, pause, stream)
    return outcomes


def _grant(gw: Gateway, model: Jittery, **kw: object) -> Grant:
    # Room for every call at once: what is tested is the budget, not concurrency or pools.
    return gw.grant("r", model, max_in_flight=64, max_connections=64, **kw)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 24),
    total=st.integers(1, 12),
    streams=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_any_interleaving_of_concurrent_gateway_calls_admits_at_most_a_turn_budget(
    n: int, total: int, streams: bool, seed: int
) -> None:
    turns = Budget(total, "turns", "the run's iteration budget")

    async def main() -> tuple[list[str], int]:
        async with Gateway() as gw:
            model = Jittery(seed, cost=10)
            grant = _grant(gw, model, budgets=[turns])
            outcomes = await _flood(gw, grant, n, seed, streams)
            assert grant.calls == model.answered
            return outcomes, model.answered

    outcomes, answered = anyio.run(main)
    assert sorted(outcomes) == sorted(["answered"] * min(n, total) + ["refused"] * (n - total))
    assert answered == min(n, total) == turns.settled
    assert turns.reserved == 0 and turns.in_flight == 0


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 24),
    budget=st.integers(1, 3000),
    cost=st.integers(1, 400),
    seed=st.integers(0, 2**32),
)
def test_any_interleaving_of_concurrent_gateway_calls_spends_at_most_one_call_past_its_budget(
    n: int, budget: int, cost: int, seed: int
) -> None:
    """A grant's own token budget: the tokens answered never pass it by more than one call,
    as many as calls sent one by one could spend."""

    async def main() -> tuple[list[str], Grant]:
        async with Gateway() as gw:
            grant = _grant(gw, Jittery(seed, cost=cost), budget=budget)
            return await _flood(gw, grant, n, seed, streams=True), grant

    outcomes, grant = anyio.run(main)
    used = grant.usage.input_tokens + grant.usage.output_tokens
    assert used == grant.calls * cost <= budget + cost
    assert grant.calls >= 1 and outcomes.count("answered") == grant.calls
    assert outcomes.count("refused") == n - grant.calls
    assert grant.own_budget is not None and grant.own_budget.settled == used


def test_grants_that_share_a_budget_are_held_to_it_together() -> None:
    """Two runs' grants draw from one tree's budget while both flood: held to it as one."""
    tree = Budget(1000, "tokens", "the token budget of the whole tree")

    async def main() -> tuple[Grant, Grant]:
        async with Gateway() as gw:
            a = _grant(gw, Jittery(1, 100), budgets=[tree])
            b = _grant(gw, Jittery(2, 100), budgets=[tree])
            async with anyio.create_task_group() as tg:
                tg.start_soon(_flood, gw, a, 30, 3, False)
                tg.start_soon(_flood, gw, b, 30, 4, False)
            return a, b

    a, b = anyio.run(main)
    assert tree.settled == (a.calls + b.calls) * 100 <= 1000 + 100
    assert a.refused + b.refused == 60 - a.calls - b.calls
    assert tree.reserved == 0 and tree.in_flight == 0


@pytest.mark.anyio
async def test_a_spent_budget_is_refused_from_the_head_before_the_body_is_read() -> None:
    async with Gateway() as gw:
        grant = gw.grant("r", Jittery(0, 50), budget=40)
        key = {"x-api-key": grant.token}
        async with client(gw.base_url) as c:
            first = await c.post("/v1/messages", json=small_body(), headers=key)
            assert first.status_code == 200
            held_before = gw.server.peak_held_bytes
            second = await c.post("/v1/messages", content=b"x" * 60_000, headers=key)
    assert second.status_code == 402 and second.headers["x-should-retry"] == "false"
    assert "this sub-agent's token budget is spent (50 of 40 tokens used)" in second.text
    assert gw.server.peak_held_bytes == held_before  # the refused body was never buffered


@pytest.mark.anyio
async def test_calls_sent_together_through_a_runs_broker_get_no_more_than_its_step_budget() -> None:
    """The issue's foreign agent: `maxSteps 2` and a 3,000-token budget, 32 calls at once
    through the gateway (the `acp` provider's grant, whose provider is the run's broker) —
    two are answered, the rest refused before they reach the model."""
    model = Jittery(7, cost=1000, delay=0.2)
    exhausted: list[str] = []
    broker = Broker(
        "run-acp",
        RunModels(model),
        None,
        lambda ev: None,
        max_turns=2,
        token_budget=3000,
        on_exhausted=exhausted.append,
    )
    async with Gateway() as gw:
        grant = gw.grant("run-acp", BrokeredModel(broker), max_in_flight=64, max_connections=64)
        outcomes = await _flood(gw, grant, 32, 7, streams=True)
    assert sorted(outcomes) == ["answered"] * 2 + ["refused"] * 30
    assert model.answered == 2 and broker.brokered.turns == 2 and grant.calls == 2
    assert grant.usage == Usage(input_tokens=1000, output_tokens=1000)
    assert exhausted and "past its 2" in exhausted[0]
