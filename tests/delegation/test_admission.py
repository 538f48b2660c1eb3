"""Admission control: a cap that queues with observable positions, and the tree's budget."""

from __future__ import annotations

import anyio
import pytest

from tether.parent.delegation import Slots, TreeBudget


async def wait_until(predicate: object, seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        while not predicate():  # type: ignore[operator]
            await anyio.sleep(0.001)


@pytest.mark.anyio
async def test_holders_past_the_limit_queue_in_order_and_see_their_positions() -> None:
    gate = Slots(2)
    positions: dict[str, list[int]] = {n: [] for n in "abcde"}
    order: list[str] = []
    release = {n: anyio.Event() for n in "abcde"}

    async def hold(name: str) -> None:
        async with gate.admitted(positions[name].append):
            order.append(name)
            await release[name].wait()

    async with anyio.create_task_group() as tg:
        for name in "abcde":
            tg.start_soon(hold, name)
            await wait_until(lambda n=name: n in order or positions[n])
        assert order == ["a", "b"] and gate.holders == 2 and gate.waiting == 3
        assert positions == {"a": [], "b": [], "c": [1], "d": [2], "e": [3]}
        release["a"].set()
        await wait_until(lambda: "c" in order)
        assert positions["d"] == [2, 1] and positions["e"] == [3, 2]
        for name in "bcde":
            release[name].set()
    assert order == list("abcde") and gate.holders == 0 and gate.waiting == 0


@pytest.mark.anyio
async def test_a_waiter_cancelled_in_the_queue_leaves_it_and_the_ones_behind_move_up() -> None:
    gate = Slots(1)
    seen: list[int] = []
    hold = anyio.Event()

    async def first() -> None:
        async with gate.admitted(lambda p: None):
            await hold.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await wait_until(lambda: gate.holders == 1)
        doomed_scope = anyio.CancelScope()

        async def doomed() -> None:
            with doomed_scope:
                async with gate.admitted(lambda p: None):
                    raise AssertionError("never admitted")

        tg.start_soon(doomed)
        await wait_until(lambda: gate.waiting == 1)

        async def last() -> None:
            async with gate.admitted(seen.append):
                pass

        tg.start_soon(last)
        await wait_until(lambda: seen == [2])
        doomed_scope.cancel()
        await wait_until(lambda: seen == [2, 1])
        hold.set()
    assert gate.holders == 0 and gate.waiting == 0


def test_slots_need_a_positive_limit() -> None:
    with pytest.raises(ValueError):
        Slots(0)


def test_the_tree_budget_counts_live_reports_once_and_settles_them() -> None:
    budget = TreeBudget(1000)
    budget.report("a", 300)
    budget.report("a", 400)  # cumulative: replaces, never adds
    budget.report("b", 100)
    assert budget.spent == 500 and budget.remaining == 500 and not budget.exceeded()
    budget.settle("a", 450, metered=False)
    assert budget.spent == 550
    budget.report("b", 600)
    assert budget.exceeded() and budget.remaining == 0
    unlimited = TreeBudget()
    unlimited.settle("x", 10**9, metered=False)
    assert not unlimited.exceeded() and unlimited.remaining is None
    with pytest.raises(ValueError):
        TreeBudget(0)


def test_a_metered_run_is_not_counted_again_when_it_settles() -> None:
    """A run whose broker reserved its turns against the pool is already counted there."""
    budget = TreeBudget(1000)
    assert budget.pool is not None
    budget.pool.count(300)  # what a broker settled
    budget.settle("a", 300, metered=True)
    assert budget.spent == 300
