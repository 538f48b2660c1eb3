"""A SIGKILLed writer loses no turn whose append had returned, and leaves a clean database.

The writer is a real process (`store_host.py append`) appending turns of a few KiB as fast as
it can and printing `appended K` only after `append` returned; the test SIGKILLs it at a random
moment (so mostly in the middle of a transaction) and then reads the database from here.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from session_hosts import Host

from tether.parent.agents.sessions import DB_NAME, Activation, SessionStore


def _turns_stored(messages: list[str]) -> list[int]:
    turns = []
    for content in messages:
        if content.startswith("turn "):
            turns.append(int(content.split()[1]))
    return turns


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_sigkilled_writer_loses_no_turn_whose_append_returned(
    state: Path, spawn_host: Callable[..., Host], seed: int
) -> None:
    rng = random.Random(seed)
    host = spawn_host("append", str(state))
    agent_id = host.line().split()[1]
    wanted = rng.randrange(20, 120)
    last = -1
    while last < wanted:
        last = int(host.line().split()[1])
    # Let it run on for a random moment, then kill it without warning.
    anyio.run(anyio.sleep, rng.random() * 0.05)
    host.kill()
    for line in host.rest():
        last = int(line.split()[1])

    conn = sqlite3.connect(state / DB_NAME)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()

    async def read() -> None:
        async with SessionStore(state) as store:
            transcript = await store.transcript(agent_id)
            turns = _turns_stored([m.content for m in transcript])
            # Every returned append is there, in order, each whole (assistant + tool result);
            # at most the one in flight when the kill came is there too.
            assert turns == list(range(len(turns)))
            assert last + 1 <= len(turns) <= last + 2
            assert len(transcript) == 2 * len(turns)
            summary = await store.get(agent_id)
            assert summary is not None
            assert summary.message_count == len(transcript)
            assert summary.usage.input_tokens == 10 * len(turns)
            # The dead writer's session reads as interrupted, and its lease is taken over.
            assert summary.status == "interrupted"
            assert summary.holder is not None and summary.holder.state == "dead"
            activation = await store.acquire(agent_id)
            assert isinstance(activation, Activation)
            assert activation.took_over is not None
            assert activation.took_over.why == "owner_dead"
            assert activation.took_over.pid == host.pid
            await activation.release()

    anyio.run(read)
