"""Continuable agents across parent processes: one live child per agent whatever the number of
parents on a database (the lease), a dead parent's agent taken over, and a parent SIGKILLed in
the middle of a conversation losing no completed turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import psutil
from agent_hosts import wait_dead
from agent_models import TURN_USAGE, Commanded, users

from tether.parent import Supervisor
from tether.parent.agents.sessions import SessionStore
from tether.protocol.messages import Usage


def test_a_second_parent_cannot_start_a_child_for_an_agent_live_elsewhere_until_it_dies(
    hosts: Any,
) -> None:
    first, second = hosts.start(), hosts.start()
    first.ask(op="spawn", prompt="first", keepAlive=60)
    spawned = first.answer()
    agent_id, child = spawned["id"], spawned["pid"]
    assert spawned["result"]["summary"] == "seen: first"

    second.ask(op="send", id=agent_id, message="hello from elsewhere")
    busy = second.answer()
    assert busy["error"] == "AgentBusy"
    assert f"owner pid {first.proc.pid}" in busy["message"]
    assert psutil.Process(child).is_running()  # the warm child was left alone

    first.kill()  # its keeper takes its child down; its lease is left behind, owner dead
    wait_dead(child)
    second.ask(op="send", id=agent_id, message="hello again")
    taken = second.answer()
    assert taken["result"]["success"], taken
    # The refused message was never stored; the history is the first parent's.
    assert taken["result"]["summary"] == "seen: first | hello again"
    assert second.finish() == 0


def test_a_parent_sigkilled_mid_conversation_loses_no_completed_turn(
    hosts: Any, state: Path, workspace: Path
) -> None:
    host = hosts.start()
    host.ask(op="spawn", prompt="STEPS 3", keepAlive=60)
    agent_id = host.answer()["id"]
    host.ask(op="send", id=agent_id, message="STEPS 5 HANG 3")
    turns = []
    while len(turns) < 3:  # the third turn of the follow-up: the child acted on the second
        got = host.line()
        assert got.get("event") == "turn", got
        turns.append(got)
    host.kill()

    async def resume() -> None:
        async with SessionStore(state) as store:
            before = await store.show(agent_id)
        assert before is not None
        assert before.summary.status == "interrupted"  # its holder is dead
        roles = [m.role for m in before.transcript]
        # Three turns of the first activation, two of the follow-up; the follow-up's second
        # turn has no tool result (it travels with the turn that never came back).
        assert roles == ["user"] + ["assistant", "tool"] * 3 + ["user"] + ["assistant", "tool"] + [
            "assistant"
        ]
        assert before.summary.usage == Usage(
            input_tokens=5 * TURN_USAGE.input_tokens, output_tokens=5 * TURN_USAGE.output_tokens
        )
        model = Commanded()
        async with Supervisor(state_dir=state) as sup:
            result = await sup.send_message(agent_id, "go on", model=model)
            [request] = model.requests
        assert result.success and result.summary == "seen: STEPS 3 | STEPS 5 HANG 3 | go on"
        sent = [m for m in request.messages if m.role != "system"]
        assert sent[: len(before.transcript)] == before.transcript
        closing = sent[len(before.transcript)]
        assert closing.role == "tool" and closing.content.startswith("no result was recorded")
        assert closing.tool_call_id == before.transcript[-1].tool_calls[0].id
        assert users(sent)[-1] == "go on"

    anyio.run(resume)
