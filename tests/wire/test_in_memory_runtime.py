"""The real child runtime and the parent's typed session, talking over in-memory byte streams:
the same conversation as over a pipe pair, without a process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.child.server import serve_streams
from tether.parent.models.scripted import ScriptedModel
from tether.parent.run.broker import Broker, RunModels
from tether.parent.run.events import ChildEvent
from tether.protocol import ConnectionClosed, ErrorCode, RemoteError
from tether.protocol.connection import Connection
from tether.protocol.messages import (
    PROTOCOL_VERSION,
    AgentDefinition,
    AgentRunParams,
    InitializeParams,
    PeerInfo,
)
from tether.wire import Endpoint
from tether.wire.child_session import ChildSession
from tether.wire.in_memory import InMemoryPeer, serve_in_memory

pytestmark = pytest.mark.anyio

COMPLETE = (
    '[{"text": "done", "toolCalls": [{"name": "complete", "arguments": {"summary": "all done"}}]}]'
)


class Linked:
    def __init__(self, session: ChildSession, events: list[ChildEvent], peer: InMemoryPeer[int]):
        self.session = session
        self.events = events
        self.peer = peer


@asynccontextmanager
async def linked(model: ScriptedModel, run_id: str = "r1") -> AsyncIterator[Linked]:
    events: list[ChildEvent] = []
    broker = Broker(run_id, RunModels(main=model), None, events.append)
    async with serve_in_memory(serve_streams, grace=5) as peer:
        parent = Endpoint(
            Connection("parent"),
            peer.receive,
            peer.send,
            on_request=broker.on_request,
            on_notification=broker.on_notification,
            strict=True,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(parent.run)
            yield Linked(ChildSession(parent), events, peer)
            await peer.close_input()  # the child's lifeline: end of its input
            with anyio.fail_after(5):
                await peer.stopped.wait()
            tg.cancel_scope.cancel()


def params(workspace: Path, run_id: str = "r1", **agent: Any) -> AgentRunParams:
    return AgentRunParams(
        run_id=run_id,
        prompt="finish",
        workspace=str(workspace),
        agent=AgentDefinition(**agent),
    )


async def handshake(link: Linked) -> None:
    await link.session.initialize(
        InitializeParams(protocol_version=PROTOCOL_VERSION, client_info=PeerInfo(name="t"))
    )


async def test_a_whole_run_in_the_real_runtime_without_a_process(tmp_path: Path) -> None:
    async with linked(ScriptedModel.from_json(COMPLETE)) as link:
        with anyio.fail_after(10):
            await handshake(link)
            result = await link.session.run(params(tmp_path))
    assert result.success and result.summary == "all done"
    kinds = [e.kind for e in link.events]
    assert kinds[0] == "started" and "tool_call" in kinds
    assert [e.seq for e in link.events] == sorted(e.seq for e in link.events)
    assert link.peer.result == 0  # end of input is the child's lifeline


async def test_a_request_before_initialize_is_refused_and_the_child_serves_on() -> None:
    async with linked(ScriptedModel.from_json("[]")) as link:
        with anyio.fail_after(10):
            with pytest.raises(RemoteError) as err:
                await link.session.ping()
            assert err.value.code == ErrorCode.NOT_INITIALIZED
            await handshake(link)
            await link.session.ping()


async def test_cancel_makes_the_pending_run_answer_aborted(tmp_path: Path) -> None:
    slow = ScriptedModel.from_json('[{"text": "thinking", "delay": 30}]')
    async with linked(slow) as link:
        with anyio.fail_after(10):
            await handshake(link)
            got: list[Any] = []
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    got.append(await link.session.run(params(tmp_path)))

                tg.start_soon(run)
                while not any(e.kind == "step" for e in link.events):
                    await anyio.sleep(0.01)
                await link.session.cancel("r1", "enough")
    [result] = got
    assert result.status == "aborted" and not result.success


async def test_shutdown_then_exit_ends_the_runtime_with_status_0() -> None:
    async with linked(ScriptedModel.from_json("[]")) as link:
        with anyio.fail_after(10):
            await handshake(link)
            await link.session.shutdown()
            await link.session.exit()
            await link.peer.stopped.wait()
            with pytest.raises(ConnectionClosed):
                await link.session.ping()
    assert link.peer.result == 0
