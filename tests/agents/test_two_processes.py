"""Two supervisors on one state directory, one agent: at most one activation at a time, the
other waits up to its bound and is then told `AgentBusy` (the CLI: one line, exit 3), nothing
is lost or corrupted, and a holder that is alive but wedged is taken over once its heartbeat is
stale — its child disposed as soon as it runs again, its writes refused."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from agent_hosts import Host, wait_dead

from tether.parent.agents.sessions import DB_NAME, SessionStore


def _up(host: Host) -> None:
    """Wait until the host serves commands (an unknown agent is an answer)."""
    host.ask(op="send", id="ag_" + "0" * 20, message="are you there?")
    assert host.answer()["error"] == "AgentUnavailable"


def _answer_and_turns(host: Host) -> tuple[dict[str, Any], list[float]]:
    """The host's next answer, and when each model turn it logged before it began."""
    turns = []
    while (got := host.line()).get("event") == "turn":
        turns.append(got["at"])
    return got, turns


def _stored_users(state: Path, agent_id: str) -> list[str]:
    async def read() -> list[str]:
        async with SessionStore(state) as store:
            transcript = await store.transcript(agent_id)
        return [m.content for m in transcript if m.role == "user"]

    return anyio.run(read)


def _integrity(state: Path) -> list[tuple[str]]:
    conn = sqlite3.connect(state / DB_NAME)
    try:
        return conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()


def test_two_supervisors_sending_to_one_agent_at_once_take_turns_and_lose_nothing(
    hosts: Any, state: Path
) -> None:
    a, b = hosts.start(), hosts.start()
    a.ask(op="spawn", prompt="first", keepAlive=0)  # no keep-alive: each message is cold
    agent_id = a.answer()["id"]
    _up(b)
    a.ask(op="send", id=agent_id, message="from a SLEEP 3", wait=60)
    b.ask(op="send", id=agent_id, message="from b SLEEP 3", wait=60)
    (ra, turns_a), (rb, turns_b) = _answer_and_turns(a), _answer_and_turns(b)
    assert ra["result"]["success"] and rb["result"]["success"], (ra, rb)
    # Sent at once: each was asked before the other was answered.
    assert ra["began"] < rb["ended"] and rb["began"] < ra["ended"]
    (first, first_turns), (second, second_turns) = sorted(
        [(ra, turns_a), (rb, turns_b)], key=lambda x: x[0]["ended"]
    )
    # One after the other: the later one's only turn came after the earlier one was answered,
    # and its child was given the earlier message and answer as history.
    assert len(first_turns) == len(second_turns) == 1
    assert second_turns[0] >= first["ended"] - 0.05
    said = {id(ra): "from a SLEEP 3", id(rb): "from b SLEEP 3"}
    first_said, second_said = said[id(first)], said[id(second)]
    assert first["result"]["summary"] == f"seen: first | {first_said}"
    assert second["result"]["summary"] == f"seen: first | {first_said} | {second_said}"

    # Held long (10 s) in one process, the other's bounded wait runs out: AgentBusy, nothing stored.
    a.ask(op="send", id=agent_id, message="hold SLEEP 10", wait=60)
    assert a.line()["event"] == "turn"  # a's activation is under way
    b.ask(op="send", id=agent_id, message="too soon", wait=0.5)
    busy = b.answer()
    assert busy["error"] == "AgentBusy" and f"owner pid {a.proc.pid}" in busy["message"]
    assert 0.5 <= busy["ended"] - busy["began"] < 10
    # The CLI, too: one line, exit 3, after its --wait.
    t0 = time.monotonic()
    argv = ["send", agent_id, "also too soon", "--state", str(state), "--wait", "0.5"]
    cli = subprocess.run(
        [sys.executable, "-m", "tether.parent.cli", "agents", *argv, "--model", "x:y"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 3, cli.stderr
    assert len(cli.stderr.splitlines()) == 1 and f"owner pid {a.proc.pid}" in cli.stderr
    assert time.monotonic() - t0 >= 0.5
    assert a.answer()["result"]["success"]

    assert _integrity(state) == [("ok",)]
    stored = ["first", first_said, second_said, "hold SLEEP 10"]  # nothing refused was stored
    assert _stored_users(state, agent_id) == stored
    assert a.finish() == 0 and b.finish() == 0


def test_a_wedged_holder_is_taken_over_once_its_heartbeat_is_stale_and_its_child_then_goes(
    hosts: Any, state: Path
) -> None:
    lease = (2.0, 0.5)  # stale after 2 s, renewed every 0.5 s
    a, b = hosts.start(lease), hosts.start(lease)
    a.ask(op="spawn", prompt="first", keepAlive=120)
    spawned = a.answer()
    agent_id, child = spawned["id"], spawned["pid"]
    _up(b)
    a.proc.send_signal(signal.SIGSTOP)  # wedged: alive, holding the lease, renewing nothing
    try:
        b.ask(op="send", id=agent_id, message="after the stall", wait=30)
        taken = b.answer()
        assert taken["result"]["success"], taken
        # Its holder lives (stopped, not dead): only a stale heartbeat let it through.
        assert taken["result"]["summary"] == "seen: first | after the stall"
    finally:
        a.proc.send_signal(signal.SIGCONT)
    # Running again, the old holder's next heartbeat finds its lease gone: its child goes.
    wait_dead(child)
    a.ask(op="send", id=agent_id, message="me again")
    refused = a.answer()
    assert refused["error"] == "AgentBusy" and f"owner pid {b.proc.pid}" in refused["message"]
    assert _integrity(state) == [("ok",)]
    assert _stored_users(state, agent_id) == ["first", "after the stall"]
    assert a.finish() == 0 and b.finish() == 0
