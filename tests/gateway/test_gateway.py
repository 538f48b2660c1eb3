"""The model gateway over real loopback HTTP: httpx clients speaking both APIs, streaming and
not, against a scripted provider behind it."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from tether.parent.gateway import Gateway, GatewayLimits, Grant, HttpLimits
from tether.parent.models.openai import OpenAIModel
from tether.parent.models.scripted import ScriptedCall, ScriptedTurn
from tether.protocol.messages import Usage

sys.path.insert(0, str(Path(__file__).parent.parent / "models"))
from gateway_kit import TEXT, Recording, exchange, until
from model_server import ModelServer, Reply

pytestmark = pytest.mark.anyio


TOOL = ScriptedTurn(
    text="Reading.",
    tool_calls=[ScriptedCall(name="Read", arguments={"file_path": "/w/a.txt"}, id="toolu_1")],
    usage=Usage(input_tokens=20, output_tokens=7),
)


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    limits = GatewayLimits(
        http=HttpLimits(header_timeout=1.0, body_timeout=1.0, idle_timeout=5.0),
        keepalive_every=0.05,
        request_bytes=64 * 1024,
    )
    async with Gateway(limits) as gw:
        yield gw


def client(gw: Gateway) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=gw.base_url, trust_env=False, timeout=10)


def anthropic_body(stream: bool = False) -> dict[str, Any]:
    return {
        "model": "claude-whatever",
        "max_tokens": 1024,
        "stream": stream,
        "system": [{"type": "text", "text": "You are terse."}],
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_0", "name": "Glob", "input": {"p": "*"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_0", "content": "a.txt"},
                    {"type": "text", "text": "go on"},
                ],
            },
        ],
        "tools": [
            {"name": "Read", "description": "read a file", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
    }


def openai_body(stream: bool = False, usage: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-whatever",
        "stream": stream,
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "ls", "arguments": '{"dir": "."}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": "a.txt"},
        ],
        "tools": [{"type": "function", "function": {"name": "Read", "parameters": {}}}],
    }
    if usage:
        body["stream_options"] = {"include_usage": True}
    return body


def sse_events(text: str) -> list[tuple[str, Any]]:
    """(event name, data) for every event of an SSE body; comments are skipped."""
    out = []
    for block in text.split("\n\n"):
        name, data = "", ""
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        if data:
            out.append((name, data if data == "[DONE]" else msgspec.json.decode(data)))
    return out


# --- Anthropic ----------------------------------------------------------------------------------


async def test_an_anthropic_call_is_answered_by_the_grants_provider_and_metered(
    gateway: Gateway,
) -> None:
    provider = Recording(TEXT)
    ledger: list[tuple[str, Usage]] = []
    grant = gateway.grant("run-a", provider, on_usage=lambda g, u: ledger.append((g.run_id, u)))
    async with client(gateway) as c:
        r = await c.post("/v1/messages", json=anthropic_body(), headers={"x-api-key": grant.token})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["content"] == [{"type": "text", "text": "Hello from tether."}]
    assert body["stop_reason"] == "end_turn" and body["model"] == "claude-whatever"
    assert body["usage"]["input_tokens"] == 11 and body["usage"]["output_tokens"] == 4
    assert grant.usage == Usage(input_tokens=11, output_tokens=4) and grant.calls == 1
    assert ledger == [("run-a", Usage(input_tokens=11, output_tokens=4))]
    (asked,) = provider.asked
    assert asked.run_id == "run-a" and asked.model is None
    assert [(m.role, m.content) for m in asked.messages] == [
        ("system", "You are terse."),
        ("user", "hi"),
        ("assistant", "Let me look."),
        ("tool", "a.txt"),
        ("user", "go on"),
    ]
    assert asked.messages[2].tool_calls[0].arguments == {"p": "*"}
    assert asked.messages[3].tool_call_id == "toolu_0"
    assert [t.name for t in asked.tools] == ["Read"]  # the server tool is not tether's


async def test_an_anthropic_stream_follows_the_apis_event_order(gateway: Gateway) -> None:
    grant = gateway.grant("run-s", Recording(TOOL))
    async with client(gateway) as c:
        r = await c.post(
            "/v1/messages?beta=true",
            json=anthropic_body(stream=True),
            headers={"authorization": f"Bearer {grant.token}"},
        )
    assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
    events = sse_events(r.text)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["usage"]["input_tokens"] == 20
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "Reading."}
    tool = events[4][1]["content_block"]
    assert tool == {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
    partial = events[5][1]["delta"]["partial_json"]
    assert msgspec.json.decode(partial) == {"file_path": "/w/a.txt"}
    assert events[7][1]["delta"]["stop_reason"] == "tool_use"
    assert events[7][1]["usage"]["output_tokens"] == 7
    assert grant.usage == Usage(input_tokens=20, output_tokens=7)


async def test_a_slow_stream_sends_keep_alives_while_the_provider_works(gateway: Gateway) -> None:
    slow = ScriptedTurn(text="late", delay=0.4, usage=Usage(input_tokens=1, output_tokens=1))
    grant = gateway.grant("run-k", Recording(slow))
    async with client(gateway) as c:
        r = await c.post(
            "/v1/messages", json=anthropic_body(stream=True), headers={"x-api-key": grant.token}
        )
    assert r.text.startswith(": keep-alive\n\n")
    assert [n for n, _ in sse_events(r.text)][-1] == "message_stop"


async def test_a_provider_failure_is_an_api_error_or_an_error_event(gateway: Gateway) -> None:
    failing = Recording(ScriptedTurn(error="upstream is down"), ScriptedTurn(error="still down"))
    grant = gateway.grant("run-f", failing)
    async with client(gateway) as c:
        r = await c.post("/v1/messages", json=anthropic_body(), headers={"x-api-key": grant.token})
        s = await c.post(
            "/v1/messages", json=anthropic_body(stream=True), headers={"x-api-key": grant.token}
        )
    assert r.status_code == 502 and r.json()["error"]["type"] == "api_error"
    assert "upstream is down" in r.json()["error"]["message"]
    (event,) = sse_events(s.text)
    assert event[0] == "error" and "still down" in event[1]["error"]["message"]
    assert grant.calls == 0 and grant.usage == Usage()


# --- OpenAI -------------------------------------------------------------------------------------


async def test_an_openai_call_with_tool_calls_round_trips(gateway: Gateway) -> None:
    provider = Recording(TOOL)
    grant = gateway.grant("run-o", provider)
    async with client(gateway) as c:
        r = await c.post(
            "/v1/chat/completions",
            json=openai_body(),
            headers={"authorization": f"Bearer {grant.token}"},
        )
    assert r.status_code == 200, r.text
    body = r.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Reading."
    (call,) = choice["message"]["tool_calls"]
    assert call["id"] == "toolu_1" and call["function"]["name"] == "Read"
    assert msgspec.json.decode(call["function"]["arguments"]) == {"file_path": "/w/a.txt"}
    assert body["usage"] == {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
    (asked,) = provider.asked
    assert [m.role for m in asked.messages] == ["system", "user", "assistant", "tool"]
    assert asked.messages[2].tool_calls[0].arguments == {"dir": "."}


async def test_an_openai_stream_ends_with_usage_and_done(gateway: Gateway) -> None:
    grant = gateway.grant("run-os", Recording(TEXT))
    async with client(gateway) as c:
        r = await c.post(
            "/chat/completions",
            json=openai_body(stream=True, usage=True),
            headers={"authorization": f"Bearer {grant.token}"},
        )
    events = [data for _, data in sse_events(r.text)]
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello from tether."
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15


# --- tokens, budgets, limits --------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-api-key": "tether-cap-guessed"},
        {"authorization": "Bearer sk-ant-some-real-looking-key"},
        {"authorization": "Basic dXNlcjpwYXNz"},
    ],
)
async def test_an_unknown_or_missing_token_is_refused_without_echo(
    gateway: Gateway, headers: dict[str, str]
) -> None:
    provider = Recording(TEXT)
    gateway.grant("run-t", provider)
    async with client(gateway) as c:
        r = await c.post("/v1/messages", json=anthropic_body(), headers=headers)
    assert r.status_code == 401
    assert r.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid capability token"},
    }
    assert r.headers["x-should-retry"] == "false"
    assert provider.asked == []


async def test_a_revoked_token_is_refused(gateway: Gateway) -> None:
    grant = gateway.grant("run-r", Recording(TEXT, TEXT))
    async with client(gateway) as c:
        ok = await c.post("/v1/messages", json=anthropic_body(), headers={"x-api-key": grant.token})
        gateway.revoke(grant)
        gone = await c.post(
            "/v1/messages", json=anthropic_body(), headers={"x-api-key": grant.token}
        )
    assert ok.status_code == 200 and gone.status_code == 401


async def test_calls_stop_with_a_clear_error_once_the_budget_is_spent(gateway: Gateway) -> None:
    grant = gateway.grant("run-b", Recording(TEXT, TEXT, TEXT), budget=20)
    key = {"x-api-key": grant.token}
    async with client(gateway) as c:
        first = await c.post("/v1/messages", json=anthropic_body(), headers=key)
        second = await c.post("/v1/messages", json=anthropic_body(), headers=key)
        third = await c.post("/v1/messages", json=anthropic_body(stream=True), headers=key)
        fourth = await c.post(
            "/v1/chat/completions",
            json=openai_body(),
            headers={"authorization": f"Bearer {grant.token}"},
        )
    assert (
        first.status_code == second.status_code == 200
    )  # 15 spent, then 30: the check is per call
    for refused in (third, fourth):
        assert refused.status_code == 402
        assert refused.headers["x-should-retry"] == "false"
    assert third.json()["error"]["type"] == "billing_error"
    assert "budget is spent (30 of 20 tokens used)" in third.json()["error"]["message"]
    assert fourth.json()["error"]["code"] == "insufficient_quota"
    assert grant.calls == 2 and grant.refused == 2


async def test_calls_past_the_grants_concurrency_are_refused(gateway: Gateway) -> None:
    slow = ScriptedTurn(text="x", delay=0.5, usage=Usage(input_tokens=1, output_tokens=1))
    grant = gateway.grant("run-c", Recording(slow, slow), max_in_flight=1)
    statuses: list[int] = []
    async with client(gateway) as c:

        async def call() -> None:
            r = await c.post(
                "/v1/messages", json=anthropic_body(), headers={"x-api-key": grant.token}
            )
            statuses.append(r.status_code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.sleep(0.1)
            tg.start_soon(call)
    assert sorted(statuses) == [200, 429]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/messages", b"{not json", 400),
        ("POST", "/v1/messages", b'{"messages": []}', 400),
        ("POST", "/v1/messages", b'{"messages": [{"role": "robot", "content": "x"}]}', 400),
        ("POST", "/v1/chat/completions", b'{"messages": [{"role": "tool", "content": "x"}]}', 400),
        ("GET", "/v1/messages", b"", 405),
        ("POST", "/v1/embeddings", b"{}", 404),
    ],
)
async def test_a_malformed_request_gets_a_clear_client_error(
    gateway: Gateway, method: str, path: str, body: bytes, status: int
) -> None:
    grant = gateway.grant("run-m", Recording(TEXT))
    async with client(gateway) as c:
        r = await c.request(method, path, content=body, headers={"x-api-key": grant.token})
    assert r.status_code == status, r.text
    assert grant.calls == 0


async def test_keep_alive_serves_several_requests_on_one_connection(gateway: Gateway) -> None:
    grant = gateway.grant("run-ka", Recording(TEXT, TEXT, TEXT))
    ports: set[int] = set()
    async with client(gateway) as c:
        for _ in range(3):
            r = await c.post(
                "/v1/messages",
                json=anthropic_body(),
                headers={"x-api-key": grant.token},
                extensions={"trace": lambda name, info: _note_port(name, info, ports)},
            )
            assert r.status_code == 200
    assert len(ports) == 1 and grant.calls == 3


async def _note_port(name: str, info: dict[str, Any], ports: set[int]) -> None:
    if name == "connection.connect_tcp.complete":
        ports.add(info["return_value"].get_extra_info("socket").getsockname()[1])


async def _raw_exchange(gw: Gateway, payload: bytes, *, wait: float) -> tuple[bytes, float]:
    """Send `payload` on a raw connection, then read what comes back until the server closes
    (bounded by `wait`)."""
    assert gw.address is not None
    started = time.monotonic()
    done = await exchange(gw.address, payload, wait=wait)
    return done.got, time.monotonic() - started


async def test_a_client_that_stalls_mid_request_is_dropped_within_its_deadline(
    gateway: Gateway,
) -> None:
    grant = gateway.grant("run-stall", Recording(TEXT))
    head = (
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n"
        b"x-api-key: " + grant.token.encode() + b'\r\n\r\n{"mess'
    )
    got, took = await _raw_exchange(gateway, head, wait=10)
    assert got.startswith(b"HTTP/1.1 408 ") and b"the request body did not arrive" in got
    assert took < 5
    got, took = await _raw_exchange(gateway, b"POST /v1/messages HTTP/1.1\r\nhost:", wait=10)
    assert got.startswith(b"HTTP/1.1 408 ") and b"the request head did not arrive" in got
    assert took < 5
    assert gateway.server.held_bytes == 0


async def test_oversized_bodies_and_too_many_headers_are_refused(gateway: Gateway) -> None:
    grant = gateway.grant("run-big", Recording(TEXT))
    big = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 10000000\r\n"
    got, _ = await _raw_exchange(gateway, big + b"\r\n", wait=5)
    assert got.startswith(b"HTTP/1.1 401 ")  # no token: refused before its size matters
    token = b"x-api-key: " + grant.token.encode() + b"\r\n"
    got, _ = await _raw_exchange(gateway, big + token + b"\r\n", wait=5)
    assert got.startswith(b"HTTP/1.1 413 ") and b"at most 65536 bytes" in got
    many = (
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n"
        + b"".join(b"x-h%d: v\r\n" % i for i in range(150))
        + b"content-length: 0\r\n\r\n"
    )
    got, _ = await _raw_exchange(gateway, many, wait=5)
    assert got.startswith(b"HTTP/1.1 431 ")
    got, _ = await _raw_exchange(gateway, b"NONSENSE\r\n\r\n", wait=5)
    assert got.startswith(b"HTTP/1.1 400 ")
    assert grant.calls == 0


async def test_a_handed_socket_bound_to_one_grant_refuses_other_tokens(gateway: Gateway) -> None:
    mine = gateway.grant("run-mine", Recording(TEXT))
    other = gateway.grant("run-other", Recording(TEXT, TEXT))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    host, port = await gateway.listen_on(sock, only=mine)
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}", trust_env=False) as c:
        refused = await c.post(
            "/v1/messages", json=anthropic_body(), headers={"x-api-key": other.token}
        )
        served = await c.post(
            "/v1/messages", json=anthropic_body(), headers={"x-api-key": mine.token}
        )
    async with client(gateway) as c:
        elsewhere = await c.post(
            "/v1/messages", json=anthropic_body(), headers={"x-api-key": other.token}
        )
    assert refused.status_code == 401 and served.status_code == 200
    assert elsewhere.status_code == 200


async def test_the_real_key_stays_with_the_provider(gateway: Gateway) -> None:
    upstream = ModelServer()
    try:
        upstream.script(
            Reply(
                body={
                    "choices": [{"message": {"role": "assistant", "content": "hi"}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
                }
            )
        )
        real = OpenAIModel.from_spec(f"small@{upstream.url}/v1")
        real._api_key = "sk-REAL-SECRET-KEY"
        grant = gateway.grant("run-key", real)
        env = gateway.env_for(grant)
        async with client(gateway) as c:
            r = await c.post(
                "/v1/chat/completions",
                json=openai_body(),
                headers={"authorization": f"Bearer {env['OPENAI_API_KEY']}"},
            )
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "hi"
        assert "sk-REAL" not in r.text and all("sk-REAL" not in v for v in env.values())
        assert upstream.received[0].headers["authorization"] == "Bearer sk-REAL-SECRET-KEY"
        assert grant.usage == Usage(input_tokens=3, output_tokens=1)
    finally:
        upstream.close()


async def test_closing_the_gateway_lets_a_call_in_progress_finish() -> None:
    slow = ScriptedTurn(text="done", delay=0.3, usage=Usage(input_tokens=1, output_tokens=1))
    got: list[int] = []
    provider = Recording(slow)
    async with Gateway() as gw:
        grant: Grant = gw.grant("run-close", provider)

        async def call() -> None:
            async with client(gw) as c:
                r = await c.post(
                    "/v1/messages", json=anthropic_body(), headers={"x-api-key": grant.token}
                )
                got.append(r.status_code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await until(lambda: provider.asked)  # the call is in progress (a sleep may not do)
            await gw._server.close()
    assert got == [200]


async def test_a_head_probe_gets_headers_only(gateway: Gateway) -> None:
    async with client(gateway) as c:
        r = await c.head("/")
    assert r.status_code == 200 and r.content == b""


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    limits = GatewayLimits(http=HttpLimits(idle_timeout=0.3))
    async with Gateway(limits) as gw:
        grant = gw.grant("run-idle", Recording(TEXT))
        request = (
            b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"x-api-key: " + grant.token.encode() + b"\r\ncontent-length: %d\r\n\r\n"
        )
        body = msgspec.json.encode(anthropic_body())
        got, took = await _raw_exchange(gw, request % len(body) + body, wait=10)
    assert got.startswith(b"HTTP/1.1 200 ") and b"Hello from tether." in got
    assert took < 5  # the server closed the idle connection; the client did not time out
