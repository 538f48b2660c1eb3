"""At most one activation per agent within one process: acquisitions of one agent are
serialized, of different agents parallel; release is idempotent and the holder's alone; a
holder whose lease was taken over cannot write again."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from tether.parent.agents.sessions import (
    Activation,
    Busy,
    LeaseLost,
    LeasePolicy,
    SessionStore,
    Unavailable,
)
from tether.protocol.messages import AgentDefinition, ChatMessage

pytestmark = pytest.mark.anyio


def _msg(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


async def test_two_acquisitions_of_one_agent_are_serialized_in_arrival_order(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(AgentDefinition())
        order: list[str] = []

        first = await store.acquire(agent.id)
        assert isinstance(first, Activation)
        busy = await store.acquire(agent.id)  # no wait: told at once who holds it
        assert isinstance(busy, Busy)
        assert busy.holder.pid == os.getpid() and busy.holder.state == "alive"

        async def second(name: str) -> None:
            activation = await store.acquire(agent.id, wait=20)
            assert isinstance(activation, Activation)
            order.append(f"{name} in")
            await activation.append(_msg(name))
            await anyio.sleep(0.05)
            order.append(f"{name} out")
            await activation.release("idle")

        async with anyio.create_task_group() as tg:
            tg.start_soon(second, "b")
            await anyio.sleep(0.05)
            tg.start_soon(second, "c")
            await anyio.sleep(0.2)
            assert order == []  # both wait behind the first holder
            order.append("a out")
            await first.release("idle")
        assert order == ["a out", "b in", "b out", "c in", "c out"]
        assert [m.content for m in await store.transcript(agent.id)] == ["b", "c"]
        assert store._slots == {}  # nothing left behind per agent


async def test_acquisitions_of_different_agents_proceed_in_parallel(state: Path) -> None:
    async with SessionStore(state) as store:
        agents = [await store.create_agent(AgentDefinition()) for _ in range(3)]
        inside = 0
        most = 0
        all_in = anyio.Event()

        async def run(agent_id: str) -> None:
            nonlocal inside, most
            activation = await store.acquire(agent_id, wait=5)
            assert isinstance(activation, Activation)
            async with activation:
                inside += 1
                most = max(most, inside)
                if inside == len(agents):
                    all_in.set()
                with anyio.fail_after(10):
                    await all_in.wait()  # would deadlock if they were serialized
                inside -= 1

        async with anyio.create_task_group() as tg:
            for agent in agents:
                tg.start_soon(run, agent.id)
        assert most == len(agents)


async def test_a_waiter_that_times_out_is_told_busy_and_leaves_nothing_behind(
    state: Path,
) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(AgentDefinition())
        holder = await store.acquire(agent.id)
        assert isinstance(holder, Activation)
        outcome = await store.acquire(agent.id, wait=0.2)
        assert isinstance(outcome, Busy)
        with anyio.move_on_after(0.1):
            await store.acquire(agent.id, wait=10)  # cancelled while waiting
        await holder.release()
        assert store._slots == {}
        again = await store.acquire(agent.id)
        assert isinstance(again, Activation)
        await again.release()


async def test_release_is_idempotent_and_only_the_holders(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(AgentDefinition())
        first = await store.acquire(agent.id)
        assert isinstance(first, Activation)
        assert await first.release("idle") is True
        assert await first.release("failed") is False  # a second release changes nothing
        second = await store.acquire(agent.id)
        assert isinstance(second, Activation)
        # The first activation's token no longer holds anything: its release and its writes
        # cannot touch the second one's lease or the session.
        assert await first.release("failed") is False
        with pytest.raises(LeaseLost):
            await first.append(_msg("late"))
        summary = await store.get(agent.id)
        assert summary is not None and summary.status == "running"
        assert summary.holder is not None and summary.holder.state == "alive"
        assert await second.release("idle") is True
        summary = await store.get(agent.id)
        assert summary is not None and summary.status == "idle" and summary.holder is None


@asynccontextmanager
async def _taken_over(state: Path) -> AsyncIterator[tuple[SessionStore, Activation, Activation]]:
    """An agent's activation in one store, with "one" written, whose lease a second store took
    over as stale: (the first store, its activation, the taker's). Two stores in one process
    stand for two processes (each has its own in-process slots); the second judges heartbeats
    older than 50 ms stale."""
    slow = LeasePolicy(stale_after=60.0)
    impatient = LeasePolicy(stale_after=0.05, heartbeat_every=0.01)
    async with (
        SessionStore(state, lease=slow) as mine,
        SessionStore(state, lease=impatient) as theirs,
    ):
        agent = await mine.create_agent(AgentDefinition())
        activation = await mine.acquire(agent.id)
        assert isinstance(activation, Activation)
        await activation.append(_msg("one"))
        await anyio.sleep(0.1)
        taker = await theirs.acquire(agent.id)
        assert isinstance(taker, Activation)
        assert taker.took_over is not None and taker.took_over.why == "stale"
        yield mine, activation, taker


async def test_a_holder_whose_lease_was_taken_over_cannot_write_again(state: Path) -> None:
    async with _taken_over(state) as (mine, activation, taker):
        agent_id = activation.agent_id
        with pytest.raises(LeaseLost):
            await activation.append(_msg("two"))  # fenced off by the new token
        assert activation.lost.is_set()
        with pytest.raises(LeaseLost):
            await activation.report("late finding")
        assert [m.content for m in await mine.transcript(agent_id)] == ["one"]
        assert await activation.release("failed") is False  # not its to release
        await taker.release("idle")


async def test_a_holder_that_lost_its_lease_and_has_not_let_go_yet_names_the_new_holder(
    state: Path,
) -> None:
    # Between the heartbeat that finds the lease gone and the end of the activation's unwinding
    # (its child taken down first), this process still holds its slot: a caller told busy then
    # hears of the process that holds the lease, not of the activation that lost it.
    async with _taken_over(state) as (mine, activation, taker):
        with pytest.raises(LeaseLost):
            await activation.append(_msg("late"))  # marks it lost; it is not released yet
        busy = await mine.acquire(activation.agent_id)
        assert isinstance(busy, Busy)
        assert busy.holder.since == taker.acquired_at  # theirs, not the lost one's
        await activation.release("failed")
        await taker.release("idle")


async def test_losing_the_lease_cancels_the_activations_body(state: Path) -> None:
    # Ours beats every 0.3 s; theirs calls a heartbeat older than 0.1 s stale.
    slow = LeasePolicy(stale_after=10.0, heartbeat_every=0.3)
    impatient = LeasePolicy(stale_after=0.1, heartbeat_every=0.05)
    async with (
        SessionStore(state, lease=slow) as mine,
        SessionStore(state, lease=impatient) as theirs,
    ):
        agent = await mine.create_agent(AgentDefinition())
        activation = await mine.acquire(agent.id)
        assert isinstance(activation, Activation)
        reached_the_end = False
        with pytest.raises(LeaseLost), anyio.fail_after(10):
            async with activation:
                await anyio.sleep(0.15)
                taker = await theirs.acquire(agent.id, wait=5)
                assert isinstance(taker, Activation)
                await anyio.sleep(5)  # cancelled by the next heartbeat, which finds it lost
                reached_the_end = True
        assert not reached_the_end
        assert activation.released
        summary = await theirs.get(agent.id)
        assert summary is not None and summary.holder is not None
        await taker.release()


async def test_heartbeats_keep_a_live_holders_lease_from_going_stale(state: Path) -> None:
    policy = LeasePolicy(stale_after=1.5, heartbeat_every=0.1)
    async with (
        SessionStore(state, lease=policy) as mine,
        SessionStore(state, lease=policy) as theirs,
    ):
        agent = await mine.create_agent(AgentDefinition())
        activation = await mine.acquire(agent.id)
        assert isinstance(activation, Activation)
        async with activation:
            for _ in range(8):  # well past the bound, twice over
                await anyio.sleep(0.4)
                assert isinstance(await theirs.acquire(agent.id), Busy)
        summary = await theirs.get(agent.id)
        assert summary is not None and summary.status == "interrupted"  # released mid-run


async def test_an_unknown_or_closed_agent_cannot_be_activated(state: Path) -> None:
    async with SessionStore(state) as store:
        missing = await store.acquire("ag_" + "0" * 20)
        assert isinstance(missing, Unavailable) and missing.reason == "unknown_agent"
        assert "list_agents" in missing.message
        agent = await store.create_agent(AgentDefinition())
        activation = await store.acquire(agent.id)
        assert isinstance(activation, Activation)
        assert isinstance(await store.close_agent(agent.id), Busy)  # not while it runs
        await activation.release("idle")
        closed = await store.close_agent(agent.id)
        assert not isinstance(closed, Busy | Unavailable) and closed.status == "closed"
        refused = await store.acquire(agent.id)
        assert isinstance(refused, Unavailable) and refused.reason == "closed"


async def test_closing_the_store_releases_live_activations_as_interrupted(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(AgentDefinition())
        activation = await store.acquire(agent.id)
        assert isinstance(activation, Activation)
    assert activation.released
    async with SessionStore(state) as store:
        summary = await store.get(agent.id)
        assert summary is not None
        assert (summary.status, summary.stored_status, summary.holder) == (
            "interrupted",
            "interrupted",
            None,
        )


async def test_a_cancelled_holder_still_releases_its_lease(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(AgentDefinition())
        with anyio.move_on_after(0.1):
            activation = await store.acquire(agent.id)
            assert isinstance(activation, Activation)
            async with activation:
                await anyio.sleep(10)
        summary = await store.get(agent.id)
        assert summary is not None and summary.holder is None
        assert summary.status == "interrupted"


async def test_a_task_told_busy_while_another_waits_hears_of_the_real_holder(
    state: Path,
) -> None:
    async with SessionStore(state) as here, SessionStore(state) as elsewhere:
        agent = await here.create_agent(AgentDefinition())
        holder = await elsewhere.acquire(agent.id)
        assert isinstance(holder, Activation)
        async with anyio.create_task_group() as tg:
            # One task of `here` waits for the lease `elsewhere` holds ...
            tg.start_soon(lambda: here.acquire(agent.id, wait=0.5))
            await anyio.sleep(0.1)
            # ... and another, not waiting, is told about `elsewhere`'s activation.
            busy = await here.acquire(agent.id)
            assert isinstance(busy, Busy)
            assert busy.holder.since == holder.acquired_at
        await holder.release()


async def test_an_error_in_the_stores_body_comes_out_as_it_is(state: Path) -> None:
    with pytest.raises(ValueError, match="mine"):
        async with SessionStore(state) as store:
            agent = await store.create_agent(AgentDefinition())
            activation = await store.acquire(agent.id)
            assert isinstance(activation, Activation)
            raise ValueError("mine")
    async with SessionStore(state) as store:
        summary = await store.get(agent.id)
        assert summary is not None and summary.holder is None


async def test_a_cancelled_store_context_releases_its_activations_and_closes(state: Path) -> None:
    with anyio.CancelScope() as scope:
        async with SessionStore(state) as store:
            agent = await store.create_agent(AgentDefinition())
            activation = await store.acquire(agent.id)
            assert isinstance(activation, Activation)
            # The deadline is set once the activation is held: one set before could expire
            # while the store opens or acquires (a loaded host took longer than 0.2 s).
            scope.deadline = anyio.current_time() + 0.2
            await anyio.sleep(10)
    assert scope.cancelled_caught
    assert activation.released
    async with SessionStore(state) as store:
        summary = await store.get(agent.id)
        assert summary is not None
        assert summary.holder is None and summary.status == "interrupted"
