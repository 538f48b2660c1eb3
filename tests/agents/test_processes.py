"""Continuable agents across parent processes: one live child per agent whatever the number of
parents on a database (the lease), a dead parent's agent taken over, and a parent SIGKILLed in
the middle of a conversation losing no completed turn."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from agent_models import TURN_USAGE, Commanded, users

from tether.parent import Supervisor
from tether.parent.sessions import SessionStore
from tether.protocol.messages import Usage

HOST = Path(__file__).parent / "agent_host.py"
DEADLINE = 60.0


class Host:
    """One `agent_host.py` parent process."""

    def __init__(self, state: Path, workspace: Path, stderr: Path) -> None:
        self.stderr_path = stderr
        with stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(HOST), str(state), str(workspace)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self._buf = b""

    def ask(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        self.proc.stdin.flush()

    def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"host {self.proc.pid} said nothing: {self.stderr()}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    pytest.fail(f"host {self.proc.pid} exited: {self.stderr()}")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\n", 1)
        value = json.loads(raw)
        assert isinstance(value, dict)
        return value

    def answer(self) -> dict[str, Any]:
        """The next line that is not a model turn event."""
        while (got := self.line()).get("event") == "turn":
            pass
        return got

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def finish(self) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.wait(timeout=DEADLINE)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE)


@pytest.fixture
def hosts(tmp_path: Path, state: Path, workspace: Path) -> Iterator[list[Host]]:
    started: list[Host] = []

    class Factory(list[Host]):
        def start(self) -> Host:
            host = Host(state, workspace, tmp_path / f"host-{len(started)}.stderr")
            started.append(host)
            return host

    yield Factory()
    for host in started:
        host.kill()
        for stream in (host.proc.stdin, host.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()


def wait_dead(pid: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.02)
    pytest.fail(f"process {pid} outlived its parent")


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
