"""The model gateway: an Anthropic- and OpenAI-compatible endpoint that foreign agents call with
a capability token, answered by the run's own provider in the parent.

Theory of operation
-------------------
One `Gateway` per supervisor (an async context manager) owns an `HttpServer` and a
`GrantTable`. By default it listens on 127.0.0.1 on a free port; `listen_on(sock)` adds any
already-listening socket, such as one the sandbox created inside a child's private network
namespace, so that child can reach this one endpoint and nothing else (`only=` binds that
socket to the child's grant: another child's token is refused there).

Per child, `grant()` mints a token bound to the run's provider, an optional token budget and a
ledger callback; `env_for(grant)` is what goes into the child's environment in place of API
keys. Each call:

1. is routed (`POST /v1/messages`, `POST /v1/chat/completions`; anything else is 404/405);
2. is authenticated: `x-api-key` or `Authorization: Bearer`, looked up in constant time; an
   unknown, revoked or missing token is a 401 whose body never echoes what was sent;
3. is refused with 402 once the grant's budget is spent, and with 429 past its concurrency;
   both carry `x-should-retry: false` (402) or `retry-after` (429), which the vendors' SDKs
   honour. A call in flight when the budget runs out completes: the check is per call;
4. is translated to a `ModelCompleteParams` (`anthropic_api`, `openai_api`), answered by the
   grant's provider within `call_timeout`, metered into the grant (the ledger callback sees
   every call's usage), and translated back, whole or as server-sent events. A stream starts
   at once and sends SSE comments as keep-alives while the provider works; a provider failure
   after that is an `error` event in the stream.

The agent's own `model`, `max_tokens` and sampling options are ignored: the parent decides
which model answers. The real credentials live in the provider and never leave the parent.
"""

from __future__ import annotations

import itertools
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import msgspec
from anyio.abc import SocketListener

from tether.parent.gateway import anthropic_api, openai_api
from tether.parent.gateway.grants import Grant, GrantTable, UsageCallback
from tether.parent.gateway.http import HttpLimits, HttpServer, Request, Responder
from tether.parent.models import ModelProvider
from tether.protocol import ErrorCode, RemoteError, WireError
from tether.protocol.messages import ModelCompleteParams, ModelCompleteResult

log = logging.getLogger(__name__)

_JSON = ("content-type", "application/json")
_SSE = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
_NO_RETRY = ("x-should-retry", "false")


@dataclass(frozen=True)
class GatewayLimits:
    http: HttpLimits = field(default_factory=HttpLimits)
    call_timeout: float = 600.0
    """The longest one model call may take in the provider."""
    keepalive_every: float = 10.0
    """How often a stream that waits for the provider sends a keep-alive comment."""


class _Failed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Dialect:
    """How one API spells errors and answers."""

    error_of: Callable[[int, str], dict[str, Any]]
    error_event: Callable[[int, str], bytes]


_ANTHROPIC = _Dialect(anthropic_api.error_of, anthropic_api.error_event)
_OPENAI = _Dialect(openai_api.error_of, openai_api.error_event)


class Gateway:
    """See the module docstring."""

    def __init__(
        self, limits: GatewayLimits | None = None, *, listen_loopback: bool = True
    ) -> None:
        self.limits = limits or GatewayLimits()
        self.grants = GrantTable()
        self._listen_loopback = listen_loopback
        self._server = HttpServer(self._handle, self.limits.http)
        self._ids = itertools.count(1)
        self._private: dict[int, list[SocketListener]] = {}
        self.address: tuple[str, int] | None = None
        """Where the loopback listener is, when there is one."""

    async def __aenter__(self) -> Gateway:
        await self._server.__aenter__()
        try:
            if self._listen_loopback:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind(("127.0.0.1", 0))
                sock.listen(128)
                self.address = await self.listen_on(sock)
        except BaseException:
            await self._server.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._server.__aexit__(exc_type, exc, tb)

    # --- listeners and grants -----------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The loopback listener's URL (no trailing slash, no `/v1`)."""
        if self.address is None:
            raise RuntimeError("this gateway has no loopback listener")
        return f"http://{self.address[0]}:{self.address[1]}"

    async def listen_on(self, sock: socket.socket, *, only: Grant | None = None) -> tuple[str, int]:
        """Serve on an already-listening TCP socket (the gateway takes it over); with `only`,
        that socket accepts that grant's token alone. Returns the socket's address."""
        host, port = sock.getsockname()[:2]
        listener = await SocketListener.from_socket(sock)
        await self._server.listen(listener, context=only)
        if only is not None:
            self._private.setdefault(id(only), []).append(listener)
        return str(host), int(port)

    def grant(
        self,
        run_id: str,
        provider: ModelProvider,
        *,
        budget: int | None = None,
        max_in_flight: int = 8,
        on_usage: UsageCallback | None = None,
    ) -> Grant:
        return self.grants.mint(
            run_id, provider, budget=budget, max_in_flight=max_in_flight, on_usage=on_usage
        )

    def revoke(self, grant: Grant) -> None:
        self.grants.revoke(grant)

    async def release(self, grant: Grant) -> None:
        """Revoke `grant` and close the sockets that served it alone (`listen_on(only=)`): a
        child's private network namespace goes away with its last socket."""
        self.grants.revoke(grant)
        for listener in self._private.pop(id(grant), []):
            await self._server.unlisten(listener)

    def env_for(self, grant: Grant, base_url: str | None = None) -> dict[str, str]:
        """The variables that point a foreign agent's model clients at this gateway with its
        token (the vendors' SDKs read these)."""
        base = base_url or self.base_url
        return {
            "ANTHROPIC_BASE_URL": base,
            "ANTHROPIC_API_KEY": grant.token,
            "OPENAI_BASE_URL": f"{base}/v1",
            "OPENAI_API_KEY": grant.token,
        }

    @property
    def requests(self) -> int:
        return self._server.requests

    # --- one call -----------------------------------------------------------------------------

    async def _handle(self, request: Request, responder: Responder) -> None:
        path = request.path
        if request.method == "HEAD":  # a client's reachability probe: headers only
            await responder.send(200, b"", [_JSON])
            return
        if path in ("/v1/messages", "/messages"):
            dialect = _ANTHROPIC
        elif path in ("/v1/chat/completions", "/chat/completions"):
            dialect = _OPENAI
        else:
            await _send_json(
                responder, 404, anthropic_api.error_of(404, f"no such endpoint: {path[:100]}")
            )
            return
        if request.method != "POST":
            await _send_json(responder, 405, dialect.error_of(405, "use POST"))
            return
        try:
            grant = self._authorize(request)
            body = _json_body(request)
            if dialect is _ANTHROPIC:
                await self._anthropic(grant, body, responder)
            else:
                await self._openai(grant, body, responder)
        except _Failed as exc:
            headers = [_NO_RETRY] if exc.status in (401, 402) else []
            if exc.status == 429:
                headers.append(("retry-after", "1"))
            await _send_json(responder, exc.status, dialect.error_of(exc.status, str(exc)), headers)

    def _authorize(self, request: Request) -> Grant:
        presented = request.header("x-api-key")
        if presented is None:
            auth = request.header("authorization") or ""
            scheme, _, value = auth.partition(" ")
            presented = value.strip() if scheme.lower() == "bearer" else None
        grant = self.grants.find(presented)
        only = request.context
        if grant is None or (only is not None and only is not grant):
            raise _Failed(401, "invalid capability token")
        return grant

    async def _anthropic(self, grant: Grant, body: Any, responder: Responder) -> None:
        try:
            params, stream, model = anthropic_api.params_of(body, grant.run_id)
        except anthropic_api.BadRequest as exc:
            raise _Failed(400, str(exc)) from None
        message_id = f"msg_tether_{next(self._ids):08d}"
        if not stream:
            result = await self._call(grant, params)
            await _send_json(responder, 200, anthropic_api.message_of(result, model, message_id))
            return
        await self._stream(
            grant,
            params,
            responder,
            _ANTHROPIC,
            lambda result: anthropic_api.events_of(result, model, message_id),
        )

    async def _openai(self, grant: Grant, body: Any, responder: Responder) -> None:
        try:
            params, stream, include_usage, model = openai_api.params_of(body, grant.run_id)
        except openai_api.BadRequest as exc:
            raise _Failed(400, str(exc)) from None
        completion_id = f"chatcmpl-tether-{next(self._ids):08d}"
        if not stream:
            result = await self._call(grant, params)
            await _send_json(responder, 200, openai_api.completion_of(result, model, completion_id))
            return
        await self._stream(
            grant,
            params,
            responder,
            _OPENAI,
            lambda result: openai_api.chunks_of(result, model, completion_id, include_usage),
        )

    def _admit(self, grant: Grant) -> None:
        if grant.exhausted:
            grant.refused += 1
            raise _Failed(
                402,
                f"this sub-agent's token budget is spent ({grant.spent} of {grant.budget} tokens)",
            )
        if grant.in_flight >= grant.max_in_flight:
            grant.refused += 1
            raise _Failed(429, f"too many calls at once (at most {grant.max_in_flight})")

    async def _call(self, grant: Grant, params: ModelCompleteParams) -> ModelCompleteResult:
        """One metered provider call; failures become `_Failed`."""
        self._admit(grant)
        grant.in_flight += 1
        grant.last_active = time.monotonic()
        try:
            with anyio.fail_after(self.limits.call_timeout):
                result = await grant.provider.complete(params)
        except TimeoutError:
            raise _Failed(
                504, f"the model did not answer within {self.limits.call_timeout:g}s"
            ) from None
        except RemoteError as exc:
            raise _Failed(502, f"the model provider failed: {exc.message}") from None
        except WireError as exc:
            # The run's broker refused the call (the parent's budgets) or its model failed.
            status = 402 if exc.code == ErrorCode.BUDGET_EXHAUSTED else 502
            raise _Failed(status, exc.message) from None
        except Exception as exc:
            log.warning("gateway: the provider for run %s failed", grant.run_id, exc_info=True)
            raise _Failed(502, f"the model provider failed: {type(exc).__name__}") from None
        finally:
            grant.in_flight -= 1
            grant.last_active = time.monotonic()
        grant.record(result.usage)
        return result

    async def _stream(
        self,
        grant: Grant,
        params: ModelCompleteParams,
        responder: Responder,
        dialect: _Dialect,
        events_of: Callable[[ModelCompleteResult], list[bytes]],
    ) -> None:
        self._admit(grant)  # refusals before the stream starts get their HTTP status
        await responder.start(200, _SSE)
        outcome: ModelCompleteResult | _Failed | None = None
        async with anyio.create_task_group() as tg:

            async def keepalive() -> None:
                while True:
                    await anyio.sleep(self.limits.keepalive_every)
                    await responder.write(b": keep-alive\n\n")

            async def call() -> None:
                nonlocal outcome
                try:
                    outcome = await self._call(grant, params)
                except _Failed as exc:
                    outcome = exc
                tg.cancel_scope.cancel()

            tg.start_soon(call)
            tg.start_soon(keepalive)
        if isinstance(outcome, _Failed):
            await responder.write(dialect.error_event(outcome.status, str(outcome)))
        elif outcome is not None:
            for event in events_of(outcome):
                await responder.write(event)
        await responder.end()


def _json_body(request: Request) -> Any:
    try:
        return msgspec.json.decode(request.body)
    except msgspec.DecodeError:
        raise _Failed(400, "the body is not JSON") from None


async def _send_json(
    responder: Responder,
    status: int,
    body: Mapping[str, Any],
    headers: list[tuple[str, str]] | None = None,
) -> None:
    await responder.send(status, msgspec.json.encode(body), [_JSON, *(headers or [])])
