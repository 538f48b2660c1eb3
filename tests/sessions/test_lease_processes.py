"""At most one activation per agent across processes: real processes race, die, wedge, and
have their pids reused, and the lease does the right thing each time."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from session_hosts import Host

from tether.parent.agents.sessions import (
    Activation,
    AgentSummary,
    Busy,
    LeasePolicy,
    SessionStore,
)
from tether.parent.agents.sessions.db import Database
from tether.parent.agents.sessions.owner import this_process
from tether.parent.agents.sessions.paths import prepare_database
from tether.protocol.messages import AgentDefinition


def _new_agent(state: Path) -> AgentSummary:
    async def create() -> AgentSummary:
        async with SessionStore(state) as store:
            return await store.create_agent(AgentDefinition())

    return anyio.run(create)


@pytest.mark.parametrize("round_", range(4))
def test_two_processes_racing_for_one_agent_exactly_one_wins(
    state: Path, spawn_host: Callable[..., Host], round_: int
) -> None:
    agent = _new_agent(state)
    hosts = [spawn_host("hold", str(state), agent.id, "--ready") for _ in range(2)]
    for host in hosts:
        assert host.line() == "ready"
    for host in hosts:
        host.send("go\n")
    outcomes = {host.pid: host.json() for host in hosts}
    won = [pid for pid, o in outcomes.items() if o["outcome"] == "acquired"]
    lost = [pid for pid, o in outcomes.items() if o["outcome"] == "busy"]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert outcomes[lost[0]]["holder"] == won[0]
    for host in hosts:
        host.close_stdin()
    winner = next(h for h in hosts if h.pid == won[0])
    assert winner.line() == "released"
    assert all(host.finish() == 0 for host in hosts)


def test_a_sigkilled_holder_is_taken_over_at_once(
    state: Path, spawn_host: Callable[..., Host]
) -> None:
    agent = _new_agent(state)
    holder = spawn_host("hold", str(state), agent.id)
    assert holder.json()["outcome"] == "acquired"

    async def check() -> None:
        async with SessionStore(state) as store:
            busy = await store.acquire(agent.id)
            assert isinstance(busy, Busy)
            assert busy.holder.pid == holder.pid and busy.holder.state == "alive"
            assert f"owner pid {holder.pid}" in busy.message

            holder.kill()
            activation = await store.acquire(agent.id)
            assert isinstance(activation, Activation)
            assert activation.took_over is not None
            assert (activation.took_over.pid, activation.took_over.why) == (
                holder.pid,
                "owner_dead",
            )
            await activation.release("idle")

    anyio.run(check)


def test_a_holder_alive_but_wedged_is_taken_over_once_its_heartbeat_is_stale(
    state: Path, spawn_host: Callable[..., Host]
) -> None:
    stale = 2.5  # well above any heartbeat delay a loaded machine causes
    agent = _new_agent(state)
    holder = spawn_host("hold", str(state), agent.id, "--stale", str(stale), "--beat", "0.2")
    assert holder.json()["outcome"] == "acquired"

    async def check() -> None:
        policy = LeasePolicy(stale_after=stale, heartbeat_every=0.2)
        async with SessionStore(state, lease=policy) as store:
            # Alive and beating: held, however long we look.
            await anyio.sleep(stale + 0.5)
            assert isinstance(await store.acquire(agent.id), Busy)

            os.kill(holder.pid, signal.SIGSTOP)  # wedged: alive, but silent
            stopped_at = time.monotonic()
            early = await store.acquire(agent.id)
            assert isinstance(early, Busy) and early.holder.state == "alive"
            activation = await store.acquire(agent.id, wait=stale * 10)
            waited = time.monotonic() - stopped_at
            assert isinstance(activation, Activation)
            assert activation.took_over is not None
            assert (activation.took_over.pid, activation.took_over.why) == (holder.pid, "stale")
            # Not before its last heartbeat was `stale` old (that heartbeat came at most one
            # interval before the stop).
            assert waited >= stale - 0.2 - 0.05

            # The old holder wakes up: its next heartbeat finds the lease gone, its body is
            # cancelled and it stops; our activation is untouched.
            os.kill(holder.pid, signal.SIGCONT)
            assert holder.line() == "lost"
            summary = await store.get(agent.id)
            assert summary is not None and summary.holder is not None
            assert summary.holder.pid == os.getpid() and summary.status == "running"
            await activation.release("idle")

    anyio.run(check)


def _write_lease(state: Path, agent_id: str, *, pid: int, start: int) -> None:
    """A lease as another process would have written it: fresh heartbeat, given pid/start."""
    me = this_process()
    db = Database(prepare_database(state))
    try:
        now_wall, now_mono = time.time(), time.monotonic()
        db.write(
            lambda c: c.execute(
                "INSERT INTO leases VALUES (?, 'someone-else', ?, ?, ?, ?, ?, ?, ?)",
                (agent_id, pid, start, me.boot, me.pidns, now_wall, now_wall, now_mono),
            )
        )
    finally:
        db.close()


def _start_of(pid: int) -> int:
    from tether.parent.agents.sessions.owner import start_ticks

    start = start_ticks(pid)
    assert start is not None
    return start


def test_a_recycled_pid_does_not_pass_for_the_holder(state: Path) -> None:
    agent = _new_agent(state)
    other = _new_agent(state)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # Same live pid, the right start time: that process holds it.
        _write_lease(state, agent.id, pid=sleeper.pid, start=_start_of(sleeper.pid))
        # Same live pid, another start time: the pid was reused; the holder is gone.
        _write_lease(state, other.id, pid=sleeper.pid, start=_start_of(sleeper.pid) - 1)

        async def check() -> None:
            async with SessionStore(state) as store:
                busy = await store.acquire(agent.id)
                assert isinstance(busy, Busy) and busy.holder.pid == sleeper.pid
                activation = await store.acquire(other.id)
                assert isinstance(activation, Activation)
                assert activation.took_over is not None
                assert activation.took_over.why == "owner_dead"
                await activation.release()

        anyio.run(check)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_waiting_acquirer_gets_the_lease_when_the_other_process_lets_go(
    state: Path, spawn_host: Callable[..., Host]
) -> None:
    agent = _new_agent(state)
    holder = spawn_host("hold", str(state), agent.id)
    assert holder.json()["outcome"] == "acquired"

    async def check() -> None:
        async with SessionStore(state) as store:
            started = time.monotonic()
            busy = await store.acquire(agent.id, wait=0.5)
            assert isinstance(busy, Busy) and busy.holder.pid == holder.pid
            assert time.monotonic() - started >= 0.45  # it did wait, to its deadline

            async def let_go() -> None:
                await anyio.sleep(0.3)
                holder.close_stdin()

            async with anyio.create_task_group() as tg:
                tg.start_soon(let_go)
                activation = await store.acquire(agent.id, wait=20)
            assert isinstance(activation, Activation)
            assert activation.took_over is None  # released cleanly, not taken over
            await activation.release()

    anyio.run(check)
    assert holder.line() == "released"
    assert holder.finish() == 0


def test_a_second_process_waiting_with_a_deadline_is_told_who_holds_it(
    state: Path, spawn_host: Callable[..., Host]
) -> None:
    agent = _new_agent(state)
    holder = spawn_host("hold", str(state), agent.id)
    assert holder.json()["outcome"] == "acquired"
    waiter = spawn_host("hold", str(state), agent.id, "--wait", "0.5")
    outcome = waiter.json()
    assert outcome == {"outcome": "busy", "pid": waiter.pid, "holder": holder.pid}
    assert waiter.finish() == 0
