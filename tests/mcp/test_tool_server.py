"""`ToolServer` in process, under the MCP SDK's own `ClientSession` over memory streams: the
seam for more tools (`ServedTool`, `from_parent_tool`), progress, errors as results, and the
cancellation of a call (shielded, bounded)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from harness import Progress
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from tether.parent.mcp_server.server import ToolServer
from tether.parent.mcp_server.tools import Answer, CallContext, ServedTool, from_parent_tool
from tether.parent.run.broker import ParentTool
from tether.protocol.messages import ToolCallParams, ToolCallResult, ToolSpec

pytestmark = pytest.mark.anyio

ECHO = ToolSpec(
    name="echo",
    description="Say it back.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 1}},
        "required": ["text"],
        "additionalProperties": False,
    },
)


@asynccontextmanager
async def connected(server: ToolServer) -> AsyncIterator[ClientSession]:
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_writes, to_client = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.run, server_reads, server_writes)
        async with ClientSession(to_client, to_server) as session:
            await session.initialize()
            yield session
        to_server.close()  # the client is gone: the server's run ends
    assert tg.cancel_scope.cancel_called is False


async def test_a_parent_tool_is_served_with_its_schema_and_its_json_as_structured_content() -> None:
    calls: list[ToolCallParams] = []

    async def echo(params: ToolCallParams) -> ToolCallResult:
        calls.append(params)
        return ToolCallResult(content=json.dumps({"echo": params.arguments["text"]}))

    server = ToolServer([from_parent_tool(ParentTool(ECHO, echo))], instructions="hi")
    async with connected(server) as session:
        [listed] = (await session.list_tools()).tools
        got = await session.call_tool("echo", {"text": "hello"})
    assert (listed.name, listed.description, listed.input_schema) == (
        "echo",
        "Say it back.",
        ECHO.input_schema,
    )
    assert not got.is_error and got.structured_content == {"echo": "hello"}
    assert got.content[0].text == '{"echo": "hello"}'
    [params] = calls
    assert (params.name, params.arguments, params.call_id) == ("echo", {"text": "hello"}, "1")


async def test_arguments_against_a_parent_tools_schema_are_refused_as_results() -> None:
    called = False

    async def echo(params: ToolCallParams) -> ToolCallResult:
        nonlocal called
        called = True
        return ToolCallResult(content="{}")

    server = ToolServer([from_parent_tool(ParentTool(ECHO, echo))], instructions="")
    async with connected(server) as session:
        empty = await session.call_tool("echo", {"text": ""})
        extra = await session.call_tool("echo", {"text": "x", "loud": True})
    assert empty.is_error and "text: '' should be non-empty" in empty.content[0].text
    assert extra.is_error and "'loud' was unexpected" in extra.content[0].text
    assert empty.structured_content is not None
    assert empty.structured_content["error"] == "invalid_arguments"
    assert not called


async def test_a_tool_that_raises_is_an_error_result_and_the_server_goes_on() -> None:
    async def broken(arguments: dict[str, Any], ctx: CallContext) -> Answer:
        raise RuntimeError("the tool's own bug")

    async def fine(arguments: dict[str, Any], ctx: CallContext) -> Answer:
        return Answer("fine", {"ok": True})

    server = ToolServer(
        [
            ServedTool("broken", "Fails.", {"type": "object"}, broken),
            ServedTool("fine", "Works.", {"type": "object"}, fine),
        ],
        instructions="",
    )
    async with connected(server) as session:
        got = await session.call_tool("broken", {})
        after = await session.call_tool("fine", {})
        with pytest.raises(MCPError, match="unknown tool 'nope'; this server offers: broken, fine"):
            await session.call_tool("nope", {})
    assert got.is_error
    assert got.content[0].text == (
        "tether could not serve this broken call: RuntimeError: the tool's own bug"
    )
    assert not after.is_error and after.structured_content == {"ok": True}


async def test_progress_lines_reach_the_client_numbered_and_before_the_result() -> None:
    async def chatty(arguments: dict[str, Any], ctx: CallContext) -> Answer:
        for line in ("one", "two", "three"):
            ctx.progress(line)  # queued, none sent yet: all must still precede the result
        return Answer("done")

    server = ToolServer(
        [ServedTool("chatty", "Talks.", {"type": "object"}, chatty)], instructions=""
    )
    progress = Progress()
    async with connected(server) as session:
        got = await session.call_tool("chatty", {}, progress_callback=progress)
        quiet = await session.call_tool("chatty", {})  # no token: no notifications
    assert got.content[0].text == "done" and quiet.content[0].text == "done"
    assert progress.seen == [(1.0, None, "one"), (2.0, None, "two"), (3.0, None, "three")]


async def test_a_cancelled_call_is_cancelled_and_waited_for_while_it_cleans_up() -> None:
    cleaned = anyio.Event()
    started = anyio.Event()

    async def slow(arguments: dict[str, Any], ctx: CallContext) -> Answer:
        started.set()
        try:
            await anyio.sleep(60)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.3)  # disposing of a child takes a while
                cleaned.set()
        return Answer("never")

    server = ToolServer([ServedTool("slow", "Slow.", {"type": "object"}, slow)], instructions="")
    async with connected(server) as session:
        with anyio.move_on_after(30) as scope, anyio.CancelScope() as cancel:

            async def cancel_when_started() -> None:
                await started.wait()
                cancel.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_when_started)
                await session.call_tool("slow", {})
        assert not scope.cancelled_caught
        with anyio.fail_after(10):
            await cleaned.wait()
        await session.send_ping()  # still serving


async def test_a_call_that_outlives_the_dispose_bound_is_left_to_the_server_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = anyio.Event()
    finished = anyio.Event()

    async def stubborn(arguments: dict[str, Any], ctx: CallContext) -> Answer:
        started.set()
        try:
            await anyio.sleep(60)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(1.5)
                finished.set()
        return Answer("never")

    server = ToolServer(
        [ServedTool("stubborn", "Slow to stop.", {"type": "object"}, stubborn)],
        instructions="",
        dispose_bound=0.3,
    )
    with caplog.at_level(logging.WARNING, logger="tether.mcp"):
        async with connected(server) as session:
            with anyio.CancelScope() as cancel:

                async def cancel_when_started() -> None:
                    await started.wait()
                    cancel.cancel()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_when_started)
                    await session.call_tool("stubborn", {})
            since = time.monotonic()
            with anyio.fail_after(10):
                while "was not over" not in caplog.text:
                    await anyio.sleep(0.02)
            warned = time.monotonic() - since
            assert not finished.is_set()  # the handler gave up waiting; the call goes on
        # The server's run does not return before the call it owns is over.
        assert finished.is_set()
    assert warned < 1.2
    assert "call 1 (stubborn) was not over 0.3 s after it was cancelled" in caplog.text
