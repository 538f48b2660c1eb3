"""Models built from strings keep their connections alive while a supervisor is open: every turn
after the first reuses one, and none is left open once the last supervisor of the event loop
has closed; outside a supervisor each turn has a connection of its own, closed after it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import psutil
import pytest
from model_server import ModelServer, Reply

from tether.parent.models import resolve_model
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import ChatMessage, ModelCompleteParams

pytestmark = pytest.mark.anyio

DEADLINE = 30.0


def _text(text: str) -> Reply:
    return Reply(
        body={
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
    )


def _complete() -> Reply:
    call = {
        "id": "done",
        "type": "function",
        "function": {"name": "complete", "arguments": json.dumps({"summary": "ok", "paths": []})},
    }
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    return Reply(
        body={
            "id": "c",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
    )


def _open_to(port: int) -> list[int]:
    """This process's TCP connections to `port` still established: their local ports."""
    return [
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    ]


PARAMS = ModelCompleteParams(run_id="r", messages=[ChatMessage(role="user", content="hi")])


async def test_every_turn_of_runs_in_one_supervisor_reuses_one_connection_closed_with_it(
    server: ModelServer, tmp_path: Path
) -> None:
    server.script(_text("thinking"), _complete(), _complete())
    model = f"openai:m@{server.url}"
    async with Supervisor() as sup:
        with anyio.fail_after(DEADLINE):
            first = await sup.run("one", model=model, workspace=tmp_path)
            second = await sup.run("two", model=model, workspace=tmp_path)
        assert first.success and second.success, (first, second)
        assert len(server.received) == 3
        assert len({r.peer for r in server.received}) == 1, "a turn opened a connection"
        assert _open_to(server.port) == [server.received[0].peer]
    assert _open_to(server.port) == []


async def test_a_nested_supervisor_leaves_the_shared_connection_to_the_one_still_open(
    server: ModelServer,
) -> None:
    server.script(_text("a"), _text("b"))
    model = resolve_model(f"openai:m@{server.url}")
    async with Supervisor():
        async with Supervisor():
            await model.complete(PARAMS)
        await model.complete(PARAMS)  # the inner one closed: the client is still the outer's
        assert len({r.peer for r in server.received}) == 1
    assert _open_to(server.port) == []


async def test_outside_a_supervisor_each_turn_has_its_own_connection_closed_after_it(
    server: ModelServer,
) -> None:
    server.script(_text("a"), _text("b"))
    model = resolve_model(f"openai:m@{server.url}")
    await model.complete(PARAMS)
    await model.complete(PARAMS)
    assert len({r.peer for r in server.received}) == 2
    assert _open_to(server.port) == []


async def test_a_cookie_a_server_sets_never_goes_back_with_another_turn(
    server: ModelServer,
) -> None:
    # The shared client serves every run of the event loop: no state of one run's turns may
    # ride along with the next (a server's tracking cookie included).
    reply = _text("a")
    reply.headers["set-cookie"] = "track=run-1; Path=/"
    server.script(reply, _text("b"))
    model = resolve_model(f"openai:m@{server.url}")
    async with Supervisor():
        await model.complete(PARAMS)
        await model.complete(PARAMS)
    assert len({r.peer for r in server.received}) == 1  # the same kept-alive client
    assert "cookie" not in server.received[1].headers
