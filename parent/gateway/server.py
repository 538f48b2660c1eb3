"""The model gateway: an Anthropic- and OpenAI-compatible endpoint that foreign agents call with
a capability token, answered by the run's own provider in the parent.

Theory of operation
-------------------
One `Gateway` per supervisor (an async context manager) owns an `HttpServer` and a
`GrantTable`. By default it listens on 127.0.0.1 on a free port; `listen_on(sock)` adds any
already-listening socket, such as one the sandbox created inside a child's private network
namespace, so that child can reach this one endpoint and nothing else (`only=` binds that
socket to the child's grant: another child's token is refused there).

Per child, `grant()` mints a token bound to the run's provider, its budgets, its quota of
the gateway and a ledger callback; `env_for(grant)` is what goes into the child's environment
in place of API keys, and `listen_for(grant)` gives the run a loopback listener of its own
(what the `acp` provider uses when it makes no private namespace). Each call:

1. is judged from its head alone (`HttpServer`'s `admit`), before any of its body is read:
   routed (`POST /v1/messages`, `POST /v1/chat/completions`; anything else is 404/405),
   authenticated (`x-api-key` or `Authorization: Bearer`, looked up in constant time; an
   unknown, revoked or missing token is a 401 whose body never echoes what was sent), and
   refused with 402 when a budget of the grant is spent or 429 past its concurrency (402
   carries `x-should-retry: false`, 429 `retry-after`, which the vendors' SDKs honour). A
   refused request is answered and its connection closed, nothing of its body held;
2. has its body read within the grant's quota (`max_body_bytes` per request, `max_held_bytes`
   for all its requests in progress, `max_connections`; see `http.py`);
3. is translated to a `ModelCompleteParams` (`anthropic_api`, `openai_api`), admitted by every
   budget of the grant counting the calls in flight (`grants.py`: reserved now, settled with
   the provider's usage when answered, so calls sent together never pass a budget), answered
   by the grant's provider within `call_timeout`, metered into the grant (the ledger callback
   sees every call's usage), and translated back, whole or as server-sent events. A stream
   starts at once and sends SSE comments as keep-alives while the provider works; a failure
   after that (a budget that refuses it, the provider) is an `error` event in the stream.

The agent's own `model`, `max_tokens` and sampling options are ignored: the parent decides
which model answers. The real credentials live in the provider and never leave the parent.
"""

from __future__ import annotations

import itertools
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import msgspec
from anyio.abc import SocketListener

from tether.parent.gateway import anthropic_api, openai_api
from tether.parent.gateway.grants import Grant, GrantTable, UsageCallback
from tether.parent.gateway.http import (
    Answer,
    Head,
    HttpLimits,
    HttpServer,
    Quota,
    Request,
    Responder,
)
from tether.parent.models import ModelProvider
from tether.parent.run.budget import Admission, Budget, Spent, admit
from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES, ErrorCode, RemoteError, WireError
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
    run_connections: int = 16
    """A grant's connections at once (the gateway's in all: `http.max_connections`)."""
    request_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """A grant's largest request body, unless its run sets its own (`grant()`)."""
    held_bytes: int = 64 * 1024 * 1024
    """The body bytes a grant's requests in progress may hold together."""


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
        self._server = HttpServer(self._admit_head, self._handle, self.limits.http)
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
        await self._server.listen(listener, context=only, quota=only.quota if only else None)
        if only is not None:
            self._private.setdefault(id(only), []).append(listener)
        return str(host), int(port)

    async def listen_for(self, grant: Grant) -> tuple[str, int]:
        """A loopback listener on a free port that serves `grant` alone (closed by
        `release`): its connections count against the grant from the accept, and a sandbox
        can allow the child that one port."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        return await self.listen_on(sock, only=grant)

    def grant(
        self,
        run_id: str,
        provider: ModelProvider,
        *,
        budget: int | None = None,
        budgets: Sequence[Budget] = (),
        max_in_flight: int = 8,
        max_connections: int | None = None,
        max_request_bytes: int | None = None,
        on_usage: UsageCallback | None = None,
    ) -> Grant:
        """A capability for one run: `budget` its own token budget, `budgets` budgets it
        shares with others (reserved per call, see `grants.py`); `max_connections` and
        `max_request_bytes` its quota (defaults: `GatewayLimits`; the bytes its requests hold
        together are at least one whole request)."""
        limits = self.limits
        request_bytes = max_request_bytes or limits.request_bytes
        quota = Quota(
            max_connections=max_connections or limits.run_connections,
            max_body_bytes=request_bytes,
            max_held_bytes=max(limits.held_bytes, request_bytes),
        )
        return self.grants.mint(
            run_id,
            provider,
            budget=budget,
            budgets=budgets,
            max_in_flight=max_in_flight,
            quota=quota,
            on_usage=on_usage,
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

    @property
    def server(self) -> HttpServer:
        """The HTTP server (its counters: `held_bytes`, `peak_held_bytes`, `connections`,
        `unclaimed`, `refused_connections`)."""
        return self._server

    # --- one call -----------------------------------------------------------------------------

    def _admit_head(self, head: Head) -> Quota | Answer:
        """Judge a request from its head: its grant's quota, or the answer (see the module
        docstring)."""
        if head.method == "HEAD":  # a client's reachability probe: headers only
            return Answer(200, b"", [_JSON])
        dialect = _dialect_of(head.path)
        if dialect is None:
            return _answer(_ANTHROPIC, _Failed(404, f"no such endpoint: {head.path[:100]}"))
        if head.method != "POST":
            return _answer(dialect, _Failed(405, "use POST"))
        try:
            grant = self._authorize(head)
            self._check(grant)
        except _Failed as exc:
            return _answer(dialect, exc)
        return grant.quota

    async def _handle(self, request: Request, responder: Responder) -> None:
        dialect = _dialect_of(request.path)
        assert dialect is not None  # admitted
        try:
            grant = self._authorize(request)  # once more: it may have been revoked since
            body = _json_body(request)
            if dialect is _ANTHROPIC:
                await self._anthropic(grant, body, responder)
            else:
                await self._openai(grant, body, responder)
        except _Failed as exc:
            answer = _answer(dialect, exc)
            await responder.send(answer.status, answer.body, answer.headers)

    def _authorize(self, head: Head) -> Grant:
        presented = head.header("x-api-key")
        if presented is None:
            auth = head.header("authorization") or ""
            scheme, _, value = auth.partition(" ")
            presented = value.strip() if scheme.lower() == "bearer" else None
        grant = self.grants.find(presented)
        only = head.context
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

    def _check(self, grant: Grant) -> None:
        """Refuse a call at once when a budget of the grant is spent or it has too many calls
        in flight."""
        for budget in grant.budgets:
            if budget.spent:
                grant.refused += 1
                raise _Failed(402, budget.why_spent())
        if grant.in_flight >= grant.max_in_flight:
            grant.refused += 1
            raise _Failed(429, f"too many calls at once (at most {grant.max_in_flight})")

    async def _reserve(self, grant: Grant, params: ModelCompleteParams) -> Admission:
        """Reserve the call's cost on every budget of the grant, counting the calls in flight
        (it may wait for one of them to settle); a spent budget is a 402."""
        try:
            return await admit(grant.draws(params))
        except Spent as exc:
            grant.refused += 1
            raise _Failed(402, str(exc)) from None

    async def _call(self, grant: Grant, params: ModelCompleteParams) -> ModelCompleteResult:
        """One metered provider call; failures become `_Failed`."""
        self._check(grant)
        grant.in_flight += 1
        grant.last_active = time.monotonic()
        admission: Admission | None = None
        try:
            with anyio.fail_after(self.limits.call_timeout):
                admission = await self._reserve(grant, params)
                result = await grant.provider.complete(params)
            usage = result.usage
            admission.settle(max(0, usage.input_tokens) + max(0, usage.output_tokens))
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
        except _Failed:
            raise
        except Exception as exc:
            log.warning("gateway: the provider for run %s failed", grant.run_id, exc_info=True)
            raise _Failed(502, f"the model provider failed: {type(exc).__name__}") from None
        finally:
            grant.in_flight -= 1
            grant.last_active = time.monotonic()
            if admission is not None:
                admission.release()  # a call that failed counts nothing (after a settle: a no-op)
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
        self._check(grant)  # refusals before the stream starts get their HTTP status
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


def _dialect_of(path: str) -> _Dialect | None:
    if path in ("/v1/messages", "/messages"):
        return _ANTHROPIC
    if path in ("/v1/chat/completions", "/chat/completions"):
        return _OPENAI
    return None


def _answer(dialect: _Dialect, failed: _Failed) -> Answer:
    """A refusal in the API's own error shape, with the headers the vendors' SDKs honour."""
    headers = [_JSON]
    if failed.status in (401, 402):
        headers.append(_NO_RETRY)
    if failed.status == 429:
        headers.append(("retry-after", "1"))
    body = msgspec.json.encode(dialect.error_of(failed.status, str(failed)))
    return Answer(failed.status, body, headers)


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
