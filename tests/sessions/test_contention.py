"""Several processes writing one database at once never fail with "database is locked"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
from session_hosts import Host

from tether.parent.agents.sessions import SessionStore
from tether.protocol.messages import Usage

WRITERS = 4
TURNS = 40


def test_concurrent_writer_processes_all_finish_and_every_turn_is_stored(
    state: Path, spawn_host: Callable[..., Host]
) -> None:
    # All start on a database that does not exist yet: they race to create and migrate it too.
    hosts = [spawn_host("churn", str(state), "--turns", str(TURNS)) for _ in range(WRITERS)]
    for host in hosts:
        assert host.line(120) == "done"
        assert host.finish() == 0, host.stderr()
        assert "locked" not in host.stderr()

    async def check() -> None:
        async with SessionStore(state) as store:
            agents = await store.list_agents()
            assert len(agents) == WRITERS
            for agent in agents:
                assert agent.status == "idle" and agent.holder is None
                assert agent.message_count == 2 * TURNS
                assert agent.usage == Usage(input_tokens=3 * TURNS, output_tokens=2 * TURNS)

    anyio.run(check)


def test_many_tasks_writing_through_one_store_do_not_trip_over_each_other(state: Path) -> None:
    from tether.parent.agents.sessions import Activation
    from tether.protocol.messages import AgentDefinition, ChatMessage

    async def run() -> None:
        async with SessionStore(state, connections=4) as store:
            agents = [await store.create_agent(AgentDefinition()) for _ in range(8)]

            async def work(agent_id: str) -> None:
                activation = await store.acquire(agent_id)
                assert isinstance(activation, Activation)
                async with activation:
                    for k in range(20):
                        await activation.append([ChatMessage(role="user", content=str(k))])
                        await store.get(agent_id)
                    await activation.release("idle")

            async with anyio.create_task_group() as tg:
                for agent in agents:
                    tg.start_soon(work, agent.id)
            for agent in agents:
                transcript = await store.transcript(agent.id)
                assert [m.content for m in transcript] == [str(k) for k in range(20)]

    anyio.run(run)
