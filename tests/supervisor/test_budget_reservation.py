"""Budgets are reserved when a turn is admitted and settled when it is answered: no interleaving
of concurrent requests gets more through than the budget allows (in memory, no process)."""

from __future__ import annotations

import random

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.parent.run import budget as budget_module
from tether.parent.run.broker import Broker, RunModels
from tether.parent.run.budget import (
    Budget,
    Spent,
    admit,
    admit_now,
    estimate_tokens,
    turn_costs,
)
from tether.protocol import ErrorCode, WireError
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    Usage,
)


class Model:
    """Answers after a random number of checkpoints, with a fixed cost per turn."""

    def __init__(self, seed: int, cost: int, max_tokens: int) -> None:
        self.rng = random.Random(seed)
        self.cost = cost
        self.max_tokens = max_tokens
        self.answered = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        for _ in range(self.rng.randrange(0, 6)):
            await anyio.lowlevel.checkpoint()
        self.answered += 1
        half = self.cost // 2
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="ok"),
            usage=Usage(input_tokens=half, output_tokens=self.cost - half),
            stop_reason="end_turn",
        )


def _params(text: str = "go") -> ModelCompleteParams:
    return ModelCompleteParams(run_id="r", messages=[ChatMessage(role="user", content=text)])


async def _flood(broker: Broker, n: int, seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    answered = refused = 0

    async def one() -> None:
        nonlocal answered, refused
        for _ in range(rng.randrange(0, 4)):
            await anyio.lowlevel.checkpoint()
        try:
            await broker.on_request("model/complete", _params())
        except WireError as exc:
            assert exc.code == ErrorCode.BUDGET_EXHAUSTED
            refused += 1
        else:
            answered += 1

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return answered, refused


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    max_turns=st.integers(1, 25),
    seed=st.integers(0, 2**32),
)
def test_any_interleaving_of_concurrent_turns_admits_at_most_the_iteration_budget(
    n: int, max_turns: int, seed: int
) -> None:
    model = Model(seed, cost=10, max_tokens=10)
    broker = Broker("r", RunModels(model), None, lambda ev: None, max_turns=max_turns)
    answered, refused = anyio.run(_flood, broker, n, seed)
    assert answered == min(n, max_turns) == model.answered
    assert answered + refused == n
    assert broker.brokered.turns == answered


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    budget=st.integers(1, 5000),
    cost=st.integers(1, 400),
    shared=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_any_interleaving_of_concurrent_turns_spends_at_most_one_turn_past_a_token_budget(
    n: int, budget: int, cost: int, shared: bool, seed: int
) -> None:
    """With a model whose cost is within the parent's estimate (its output allowance covers
    it), the tokens answered never pass the budget by more than one turn: as many as a run
    that sent its turns one by one could spend."""
    model = Model(seed, cost=cost, max_tokens=cost)
    tree = Budget(budget, label="the tree's budget")
    broker = Broker(
        "r",
        RunModels(model),
        None,
        lambda ev: None,
        token_budget=None if shared else budget,
        budgets=(tree,) if shared else (),
    )
    anyio.run(_flood, broker, n, seed)
    used = broker.brokered.input_tokens + broker.brokered.output_tokens
    assert used <= budget + cost
    assert model.answered >= min(n, 1)


def test_a_shared_budget_counts_every_run_that_draws_from_it() -> None:
    """Two runs of one tree, flooding together, are held to the tree's budget as one."""
    tree = Budget(1000, label="the token budget of the whole tree")

    async def main() -> tuple[int, int]:
        a = Broker("a", RunModels(Model(1, 100, 100)), None, lambda ev: None, budgets=(tree,))
        b = Broker("b", RunModels(Model(2, 100, 100)), None, lambda ev: None, budgets=(tree,))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_flood, a, 30, 3)
            tg.start_soon(_flood, b, 30, 4)
        return a.brokered.turns, b.brokered.turns

    turns_a, turns_b = anyio.run(main)
    assert tree.settled <= 1000 + 100
    assert (turns_a + turns_b) * 100 == tree.settled
    assert tree.reserved == 0 and tree.in_flight == 0


def test_a_turn_that_does_not_fit_beside_others_waits_for_them_then_is_admitted() -> None:
    budget = Budget(300)

    async def main() -> list[str]:
        order: list[str] = []
        first = await admit([(budget, 200)])
        order.append("first admitted")

        async def second() -> None:
            got = await admit([(budget, 200)])
            order.append("second admitted")
            got.settle(50)

        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            order.append("first settles")
            first.settle(100)
        return order

    assert anyio.run(main) == ["first admitted", "first settles", "second admitted"]
    assert budget.settled == 150 and budget.reserved == 0


def test_a_spent_budget_refuses_and_a_released_turn_counts_nothing() -> None:
    budget = Budget(100, label="the budget")

    async def main() -> None:
        got = await admit([(budget, 80)])
        got.release()
        assert (budget.settled, budget.reserved, budget.in_flight) == (0, 0, 0)
        got = await admit([(budget, 80)])
        got.settle(120)
        with pytest.raises(Spent, match="the budget is spent"):
            await admit([(budget, 1)])

    anyio.run(main)


def test_a_budget_that_becomes_spent_tells_its_listeners_once() -> None:
    told: list[str] = []
    budget = Budget(100, label="the tree's budget")
    budget.on_spent.append(told.append)

    async def main() -> None:
        for _ in range(3):
            try:
                (await admit([(budget, 10)])).settle(60)
            except Spent:
                pass

    anyio.run(main)
    assert told == ["the tree's budget is spent (120 of 100 tokens used)"]


def test_admitting_without_waiting_reserves_what_fits_and_names_what_would_wait() -> None:
    budget = Budget(300)
    turns = Budget(5, "turns")
    first = admit_now([(budget, 200), (turns, 1)])
    assert first is not None
    assert (budget.reserved, turns.reserved) == (200, 1)
    # It would have to wait beside the first: nothing is reserved on either budget.
    assert admit_now([(budget, 200), (turns, 1)]) is None
    assert (budget.reserved, turns.reserved) == (200, 1)
    first.settle(300)
    with pytest.raises(Spent, match="is spent"):
        admit_now([(budget, 1)])


def test_a_run_without_a_token_budget_does_not_estimate_its_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    estimated: list[int] = []

    def counting(params: ModelCompleteParams, reserve: int | None) -> int:
        estimated.append(1)
        return estimate_tokens(params, reserve)

    monkeypatch.setattr(budget_module, "estimate_tokens", counting)
    model = Model(0, 10, 10)

    async def main() -> None:
        turns_only = Broker("r", RunModels(model), None, lambda ev: None, max_turns=3)
        await turns_only.on_request("model/complete", _params())
        assert estimated == []  # a pass over the whole transcript, for nothing
        with_tokens = Broker("r", RunModels(model), None, lambda ev: None, token_budget=10**6)
        await with_tokens.on_request("model/complete", _params())
        assert estimated == [1]
        shared = Broker("r", RunModels(model), None, lambda ev: None, budgets=[Budget(10**6)])
        await shared.on_request("model/complete", _params())
        assert estimated == [1, 1]

    anyio.run(main)
    assert model.answered == 3


def test_a_turn_costs_one_on_a_turn_budget_and_its_estimate_on_a_token_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    turns, tokens = Budget(5, "turns"), Budget(10**6)
    estimated: list[int] = []

    def counting(params: ModelCompleteParams, reserve: int | None) -> int:
        estimated.append(1)
        return estimate_tokens(params, reserve)

    monkeypatch.setattr(budget_module, "estimate_tokens", counting)
    assert turn_costs([turns], _params("x" * 400), 100) == [(turns, 1)]
    assert estimated == []  # no token budget: no pass over the request
    assert turn_costs([turns, tokens], _params("x" * 400), 100) == [
        (turns, 1),
        (tokens, 400 // 4 + 1 + 100),
    ]
    assert estimated == [1]


def test_the_estimate_counts_the_request_and_the_output_allowance() -> None:
    short = estimate_tokens(_params("x" * 40), 100)
    long = estimate_tokens(_params("x" * 4000), 100)
    assert short == 40 // 4 + 1 + 100
    assert long - short == (4000 - 40) // 4
    assert estimate_tokens(_params(), None) > 4000  # no allowance stated: a generous one


def test_a_closed_broker_serves_nothing() -> None:
    model = Model(0, 10, 10)
    broker = Broker("r", RunModels(model), None, lambda ev: None)
    broker.close("the run is idle between activations")

    async def main() -> None:
        with pytest.raises(WireError) as got:
            await broker.on_request("model/complete", _params())
        assert got.value.code == ErrorCode.RUN_IDLE

    anyio.run(main)
    assert model.answered == 0
