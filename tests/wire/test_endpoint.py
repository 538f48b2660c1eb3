"""The endpoint over in-memory byte streams: correlation, cancellation, backpressure, faults,
idle clock. No processes: each side is an `Endpoint` on one end of two memory pipes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from tether.protocol import (
    ConnectionClosed,
    ErrorCode,
    LocalProtocolError,
    RemoteError,
    WireError,
)
from tether.protocol import messages as m
from tether.protocol.connection import Connection
from tether.protocol.methods import AGENT_EVENT, AGENT_RUN, MODEL_COMPLETE, PING
from tether.wire import Endpoint, MemoryReceiveStream, MemorySendStream, StreamEnd, memory_pipe

pytestmark = pytest.mark.anyio

Handler = Callable[[str, Any], Awaitable[Any]]


async def _refuse(method: str, params: Any) -> Any:
    raise WireError(ErrorCode.METHOD_NOT_FOUND, f"no {method}")


async def _ignore(method: str, params: Any) -> None:
    return None


def turn(text: str = "hi") -> m.ModelCompleteResult:
    return m.ModelCompleteResult(message=m.ChatMessage(role="assistant", content=text))


def ask(run_id: str = "r") -> m.ModelCompleteParams:
    return m.ModelCompleteParams(run_id=run_id, messages=[])


Pipes = tuple[MemorySendStream, MemoryReceiveStream, MemorySendStream, MemoryReceiveStream]


@asynccontextmanager
async def two_pipes(
    max_chunks: float = 64,
) -> AsyncIterator[Pipes]:
    """Pipes to the child and to the parent; every end is closed afterwards."""
    to_child_w, to_child_r = memory_pipe(max_chunks)
    to_parent_w, to_parent_r = memory_pipe(max_chunks)
    try:
        yield to_child_w, to_child_r, to_parent_w, to_parent_r
    finally:
        for end in (to_child_w, to_child_r, to_parent_w, to_parent_r):
            await end.aclose()


class Pair:
    """A parent endpoint and a child endpoint talking over memory pipes."""

    def __init__(self, parent: Endpoint, child: Endpoint, raw_to_parent: MemorySendStream) -> None:
        self.parent = parent
        self.child = child
        self.raw_to_parent = raw_to_parent
        """The child's write end, for bytes no well-behaved child would send."""


@asynccontextmanager
async def pair(
    *,
    parent_serves: Handler = _refuse,
    child_serves: Handler = _refuse,
    on_event: Callable[[str, Any], Awaitable[None]] = _ignore,
    max_concurrent: int = 32,
    child_eager: bool = False,
) -> AsyncIterator[Pair]:
    async with two_pipes() as (to_child_w, to_child_r, to_parent_w, to_parent_r):
        parent = Endpoint(
            Connection("parent"),
            to_parent_r,
            to_child_w,
            on_request=parent_serves,
            on_notification=on_event,
            strict=True,
            max_concurrent=max_concurrent,
        )
        child = Endpoint(
            Connection("child"),
            to_child_r,
            to_parent_w,
            on_request=child_serves,
            on_notification=_ignore,
            strict=False,
            close_on_send_failure=True,
            eager=child_eager,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(parent.run)
            tg.start_soon(child.run)
            yield Pair(parent, child, to_parent_w)
            tg.cancel_scope.cancel()


class LoneChild:
    """A lenient child endpoint driven with raw bytes, its output read back as lines."""

    def __init__(self, to_child: MemorySendStream, from_child: MemoryReceiveStream) -> None:
        self._to_child = to_child
        self._from_child = from_child
        self._buf = b""

    async def send(self, line: bytes) -> None:
        await self._to_child.send(line)

    async def lines(self, n: int) -> list[bytes]:
        with anyio.fail_after(5):
            while self._buf.count(b"\n") < n:
                self._buf += await self._from_child.receive()
        *got, self._buf = self._buf.split(b"\n", n)
        return got


@asynccontextmanager
async def lone_child(
    serves: Handler,
    *,
    notices: Callable[[str, Any], Awaitable[None]] = _ignore,
    gate: Callable[[str], None] = lambda method: None,
    peer_cap: int = 1 << 20,
) -> AsyncIterator[LoneChild]:
    async with two_pipes() as (to_child_w, to_child_r, to_parent_w, to_parent_r):
        child = Endpoint(
            Connection("child", peer_max_message_bytes=peer_cap),
            to_child_r,
            to_parent_w,
            on_request=serves,
            on_notification=notices,
            strict=False,
            gate=gate,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(child.run)
            yield LoneChild(to_child_w, to_parent_r)
            tg.cancel_scope.cancel()


async def test_requests_in_both_directions_come_back_typed() -> None:
    async def parent_serves(method: str, params: Any) -> Any:
        assert isinstance(params, m.ModelCompleteParams)
        return turn(f"answer to {params.run_id}")

    async def child_serves(method: str, params: Any) -> Any:
        return m.Empty()

    async with pair(parent_serves=parent_serves, child_serves=child_serves) as p:
        with anyio.fail_after(5):
            assert await p.parent.request(PING, m.Empty()) == m.Empty()
            got = await p.child.request(MODEL_COMPLETE, ask("r7"))
        assert got.message.content == "answer to r7"


async def test_concurrent_requests_are_matched_to_their_own_answers() -> None:
    async def parent_serves(method: str, params: Any) -> Any:
        await anyio.sleep(0.05 if params.run_id == "slow" else 0)
        return turn(params.run_id)

    async with pair(parent_serves=parent_serves) as p:
        got: dict[str, str] = {}

        async def one(name: str) -> None:
            got[name] = (await p.child.request(MODEL_COMPLETE, ask(name))).message.content

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for name in ("slow", "a", "b", "c"):
                    tg.start_soon(one, name)
    assert got == {"slow": "slow", "a": "a", "b": "b", "c": "c"}


async def test_an_error_raised_by_a_handler_reaches_the_caller_as_remote_error() -> None:
    async def parent_serves(method: str, params: Any) -> Any:
        raise WireError(ErrorCode.NO_MODEL, "no model", {"hint": "pass model="})

    async with pair(parent_serves=parent_serves) as p:
        with anyio.fail_after(5), pytest.raises(RemoteError) as err:
            await p.child.request(MODEL_COMPLETE, ask())
    assert (err.value.code, err.value.message, err.value.data) == (
        ErrorCode.NO_MODEL,
        "no model",
        {"hint": "pass model="},
    )


async def test_a_handler_bug_becomes_a_fixed_internal_error_without_library_text() -> None:
    async def parent_serves(method: str, params: Any) -> Any:
        raise KeyError("secret-internal-detail")

    async with pair(parent_serves=parent_serves) as p:
        with anyio.fail_after(5), pytest.raises(RemoteError) as err:
            await p.child.request(MODEL_COMPLETE, ask())
    assert err.value.code == ErrorCode.INTERNAL_ERROR
    assert "secret-internal-detail" not in err.value.message


async def test_a_cancelled_request_leaves_its_late_reply_harmless() -> None:
    release = anyio.Event()

    async def child_serves(method: str, params: Any) -> Any:
        await release.wait()
        return m.Empty()

    async with pair(child_serves=child_serves) as p:
        with anyio.move_on_after(0.1):
            await p.parent.request(PING, m.Empty())
        release.set()
        with anyio.fail_after(5):
            while p.parent.late_replies == 0:
                await anyio.sleep(0.01)
        assert p.parent.end is None  # a late reply is not a protocol fault
        assert p.parent.connection.pending == 0
        with anyio.fail_after(5):  # and the conversation goes on
            assert await p.parent.request(PING, m.Empty()) == m.Empty()


async def test_when_the_peer_goes_away_every_waiting_request_fails_at_once() -> None:
    hold = anyio.Event()

    async def child_serves(method: str, params: Any) -> Any:
        await hold.wait()
        return m.Empty()

    async with pair(child_serves=child_serves) as p:
        failures: list[str] = []

        async def waiting() -> None:
            try:
                await p.parent.request(PING, m.Empty())
            except ConnectionClosed as exc:
                failures.append(str(exc))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(waiting)
            await anyio.sleep(0.05)
            await p.raw_to_parent.aclose()  # the child's output ends
        assert failures == ["output closed"] * 5
        with pytest.raises(ConnectionClosed):
            await p.parent.request(PING, m.Empty())


async def test_a_strict_side_ends_the_conversation_at_the_first_garbage_line() -> None:
    async with pair() as p:
        await p.raw_to_parent.send(b"not json at all\n")
        with anyio.fail_after(5):
            await p.parent.ended.wait()
    assert p.parent.end is not None
    assert p.parent.end.fault is not None and "not JSON-RPC" in p.parent.end.fault


async def test_a_strict_side_ends_the_conversation_at_a_reply_to_an_id_it_never_sent() -> None:
    async with pair() as p:
        await p.raw_to_parent.send(b'{"jsonrpc": "2.0", "id": 41, "result": {}}\n')
        with anyio.fail_after(5):
            await p.parent.ended.wait()
    assert p.parent.end is not None and p.parent.end.fault == "a response to unknown id 41"


async def test_a_lenient_side_answers_garbage_with_an_error_and_serves_on() -> None:
    async def child_serves(method: str, params: Any) -> Any:
        return m.Empty()

    async with lone_child(child_serves) as child:
        await child.send(b"{broken\n")
        await child.send(b'{"jsonrpc": "2.0", "id": 3, "method": "ping"}\n')
        lines = await child.lines(2)
    assert b'"code":-32700' in lines[0] and b'"id":null' in lines[0]
    assert lines[1] == b'{"jsonrpc":"2.0","id":3,"result":{}}'


async def test_the_gate_refuses_requests_and_drops_notifications_before_their_handlers() -> None:
    seen: list[str] = []

    def gate(method: str) -> None:
        if method != "initialize":
            raise WireError(ErrorCode.NOT_INITIALIZED, f"not initialized: {method}")

    async def serves(method: str, params: Any) -> Any:
        seen.append(method)
        return m.Empty()

    async def notices(method: str, params: Any) -> None:
        seen.append(method)

    async with lone_child(serves, notices=notices, gate=gate) as child:
        await child.send(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
        # A request the gate refuses gets the gate's answer even when its params are bad.
        await child.send(b'{"jsonrpc": "2.0", "id": 2, "method": "agent/run", "params": []}\n')
        await child.send(
            b'{"jsonrpc": "2.0", "method": "agent/cancel", "params": {"runId": "r"}}\n'
        )
        out = b"\n".join(await child.lines(2))
    assert out.count(b'"code":-32000') == 2
    assert seen == []


async def test_a_flood_of_requests_is_served_at_most_max_concurrent_at_a_time() -> None:
    running = 0
    peak = 0

    async def parent_serves(method: str, params: Any) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return turn()

    async with (
        pair(parent_serves=parent_serves, max_concurrent=4) as p,
        anyio.create_task_group() as tg,
    ):
        for i in range(20):
            tg.start_soon(p.child.request, MODEL_COMPLETE, ask(str(i)))
    assert peak == 4


async def test_the_idle_clock_stands_still_while_a_request_of_the_peer_is_being_served() -> None:
    release = anyio.Event()

    async def parent_serves(method: str, params: Any) -> Any:
        await release.wait()
        return turn()

    async with pair(parent_serves=parent_serves) as p:
        async with anyio.create_task_group() as tg:
            tg.start_soon(p.child.request, MODEL_COMPLETE, ask())
            await anyio.sleep(0.15)
            assert p.parent.quiet_for() == 0.0
            release.set()
        await anyio.sleep(0.1)
        assert p.parent.quiet_for() >= 0.05


async def test_an_answer_over_the_peers_cap_goes_out_as_message_too_large() -> None:
    async def child_serves(method: str, params: Any) -> Any:
        return m.ToolApproveResult(allow=True, reason="x" * 500)

    async with lone_child(child_serves, peer_cap=200) as child:
        await child.send(b'{"jsonrpc": "2.0", "id": 9, "method": "ping"}\n')
        [out] = await child.lines(1)
    assert b'"id":9' in out and b'"code":-32006' in out


async def test_notifications_reach_the_handler_in_order_and_malformed_ones_are_counted() -> None:
    got: list[int] = []

    async def on_event(method: str, params: Any) -> None:
        got.append(params.seq)

    async with pair(on_event=on_event) as p:
        for seq in range(5):
            await p.child.notify(AGENT_EVENT, m.AgentEventParams(run_id="r", seq=seq, kind="step"))
        await p.raw_to_parent.send(
            b'{"jsonrpc": "2.0", "method": "agent/event", "params": {"runId": 1}}\n'
        )
        with anyio.fail_after(5):
            while p.parent.dropped_notifications == 0:
                await anyio.sleep(0.01)
    assert got == [0, 1, 2, 3, 4]


async def test_a_request_over_the_peers_cap_fails_locally_and_spends_nothing() -> None:
    async with pair() as p:
        p.parent.connection.peer_max_message_bytes = 100
        with pytest.raises(LocalProtocolError):
            await p.parent.request(AGENT_RUN, m.AgentRunParams(run_id="r", prompt="x" * 200))
        assert p.parent.connection.pending == 0
        assert p.parent.end is None


async def test_requests_held_at_once_stay_within_the_byte_budget() -> None:
    held = 0
    peak = 0
    budget = 300_000

    async def parent_serves(method: str, params: Any) -> Any:
        nonlocal held, peak
        size = len(params.messages[0].content)
        held += size
        peak = max(peak, held)
        await anyio.sleep(0.01)
        held -= size
        return turn()

    to_child_w, to_child_r = memory_pipe()
    to_parent_w, to_parent_r = memory_pipe()
    parent = Endpoint(
        Connection("parent"),
        to_parent_r,
        to_child_w,
        on_request=parent_serves,
        on_notification=_ignore,
        strict=True,
        max_held_bytes=budget,
    )
    child = Endpoint(
        Connection("child"),
        to_child_r,
        to_parent_w,
        on_request=_refuse,
        on_notification=_ignore,
        strict=False,
    )
    big = m.ModelCompleteParams(
        run_id="r", messages=[m.ChatMessage(role="user", content="x" * 100_000)]
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(parent.run)
        tg.start_soon(child.run)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as flood:
                for _ in range(20):
                    flood.start_soon(child.request, MODEL_COMPLETE, big)
        tg.cancel_scope.cancel()
    for end in (to_child_w, to_child_r, to_parent_w, to_parent_r):
        await end.aclose()
    assert 100_000 < peak <= budget


async def test_the_idle_clock_runs_while_an_answer_waits_for_a_peer_that_does_not_read() -> None:
    async def parent_serves(method: str, params: Any) -> Any:
        return turn("x" * 200_000)  # several chunks: the answer stalls in a full pipe

    to_child_w, to_child_r = memory_pipe(max_chunks=0)
    to_parent_w, to_parent_r = memory_pipe()
    parent = Endpoint(
        Connection("parent"),
        to_parent_r,
        to_child_w,
        on_request=parent_serves,
        on_notification=_ignore,
        strict=True,
    )
    conn = Connection("child")
    _, line = conn.send_request(MODEL_COMPLETE, ask())
    async with anyio.create_task_group() as tg:
        tg.start_soon(parent.run)
        await to_parent_w.send(line)  # the request, and then the child never reads again
        await anyio.sleep(0.3)
        assert parent.quiet_for() >= 0.2
        tg.cancel_scope.cancel()
    for end in (to_child_w, to_child_r, to_parent_w, to_parent_r):
        await end.aclose()


def run_params(run_id: str) -> m.AgentRunParams:
    return m.AgentRunParams(run_id=run_id, prompt="go", workspace="/")


DONE = m.RunResult(success=True, status="completed")


@pytest.mark.parametrize("eager", [False, True])
async def test_an_eager_side_serves_requests_that_never_wait_in_the_readers_own_task(
    eager: bool,
) -> None:
    tasks: list[object] = []

    async def child_serves(method: str, params: Any) -> Any:
        tasks.append(asyncio.current_task())
        return DONE

    async with pair(child_serves=child_serves, child_eager=eager) as p:
        for i in range(3):
            assert await p.parent.request(AGENT_RUN, run_params(str(i))) == DONE
    assert len(set(map(id, tasks))) == (1 if eager else 3)


async def test_an_eager_request_that_waits_hands_the_reading_on_and_keeps_its_task() -> None:
    go = anyio.Event()
    served: list[str] = []

    async def child_serves(method: str, params: Any) -> Any:
        if method == "ping":
            served.append("ping")
            go.set()
            return m.Empty()
        before = asyncio.current_task()
        await go.wait()  # only the ping behind it sets this: the reading must have moved on
        assert asyncio.current_task() is before
        served.append(params.run_id)
        return DONE

    async with pair(child_serves=child_serves, child_eager=True) as p:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(p.parent.request, AGENT_RUN, run_params("a"))
                tg.start_soon(p.parent.request, AGENT_RUN, run_params("b"))
                await anyio.sleep(0.05)
                await p.parent.request(PING, m.Empty())
            # and the reading goes on: a request that never waits is answered again
            go = anyio.Event()
            go.set()
            assert await p.parent.request(AGENT_RUN, run_params("c")) == DONE
    assert served[0] == "ping" and sorted(served[1:3]) == ["a", "b"] and served[3] == "c"


async def test_an_eager_request_still_waiting_when_the_conversation_ends_is_cancelled() -> None:
    cancelled = anyio.Event()

    async def child_serves(method: str, params: Any) -> Any:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    async with two_pipes() as (to_child_w, to_child_r, to_parent_w, _from_child):
        child = Endpoint(
            Connection("child"),
            to_child_r,
            to_parent_w,
            on_request=child_serves,
            on_notification=_ignore,
            strict=False,
            eager=True,
        )
        parent = Connection("parent")
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(child.run)
                await to_child_w.send(parent.send_request(AGENT_RUN, run_params("r"))[1])
                await anyio.sleep(0.05)
                await to_child_w.aclose()  # EOF
                await cancelled.wait()
        assert child.end is not None


def lone_parent(
    receive: MemoryReceiveStream,
    send: MemorySendStream,
    *,
    serves: Handler = _refuse,
    notices: Callable[[str, Any], Awaitable[None]] = _ignore,
    on_end: Callable[[StreamEnd], None] | None = None,
) -> Endpoint:
    """A strict, eager parent endpoint (as the supervisor's) whose peer the test drives raw."""
    return Endpoint(
        Connection("parent"),
        receive,
        send,
        on_request=serves,
        on_notification=notices,
        strict=True,
        eager=True,
        on_end=on_end,
    )


async def test_an_eager_side_whose_answer_the_peer_does_not_take_reads_on() -> None:
    """The parent serves eagerly; a child that sends requests and never reads fills the pipe
    with their answers. The answer that cannot be written holds its request, not the reader:
    what the child says next still arrives."""
    heard: list[int] = []
    got_event = anyio.Event()

    async def on_event(method: str, params: Any) -> None:
        heard.append(params.seq)
        got_event.set()

    async def parent_serves(method: str, params: Any) -> Any:
        return turn("x" * 100)

    async with two_pipes(max_chunks=1) as (to_child_w, _to_child_r, to_parent_w, to_parent_r):
        parent = lone_parent(to_parent_r, to_child_w, serves=parent_serves, notices=on_event)
        child = Connection("child")
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(parent.run)
                for _ in range(4):  # one answer fits the pipe; the rest wait to be written
                    await to_parent_w.send(child.send_request(MODEL_COMPLETE, ask())[1])
                event = m.AgentEventParams(run_id="r", seq=7, kind="step")
                await to_parent_w.send(child.send_notification(AGENT_EVENT, event))
                await got_event.wait()
                tg.cancel_scope.cancel()
    assert heard == [7]


async def test_the_end_is_reported_once_and_before_any_waiting_request_wakes() -> None:
    """`on_end` sees why the conversation ended (here: half a line, then the output closes)
    before a request waiting for an answer learns that it failed."""
    seen: list[str] = []

    def on_end(end: StreamEnd) -> None:
        seen.append(f"end: truncated={end.truncated}")

    async with two_pipes() as (to_child_w, _to_child_r, to_parent_w, to_parent_r):
        parent = lone_parent(to_parent_r, to_child_w, on_end=on_end)

        async def waiting() -> None:
            with pytest.raises(ConnectionClosed):
                await parent.request(PING, m.Empty())
            seen.append("request failed")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(parent.run)
                tg.start_soon(waiting)
                await anyio.sleep(0.05)
                await to_parent_w.send(b'{"jsonrpc":"2.0","id":1,"res')
                await to_parent_w.aclose()
    assert seen == ["end: truncated=True", "request failed"]


async def test_on_sent_runs_once_the_request_is_written_and_before_its_answer() -> None:
    """What a caller does on `on_sent` (a continuable child is let out of its freezer there)
    comes after the request is in the pipe and before the answer is handled."""
    order: list[str] = []
    release = anyio.Event()

    async def child_serves(method: str, params: Any) -> Any:
        order.append("served")
        await release.wait()
        return m.Empty()

    async with pair(child_serves=child_serves) as p:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: p.parent.request(
                        PING,
                        m.Empty(),
                        on_sent=lambda: order.append("sent"),
                        on_answer=lambda: order.append("answered"),
                    )
                )
                while "served" not in order:
                    await anyio.sleep(0.001)
                release.set()
    assert order.count("sent") == 1 and order.count("answered") == 1
    assert order.index("sent") < order.index("answered")
