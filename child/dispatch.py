"""Dispatch of the parent's requests and notifications through jsonrpcserver.

This is the only module that imports jsonrpcserver; its types never leave it. The division of
labour:

* the wire's `Connection` does all decoding: framing, the envelope, and the typed params from
  the method table. The deserializer we hand jsonrpcserver returns an already-prepared request
  (the string argument is unused) whose single positional param is the typed params Struct, and
  the validator accepts it as is; jsonrpcserver's json.loads and JSON-Schema check never run.
* jsonrpcserver does the method lookup, the argument check, the call, and the notification rule
  (no response) — through its synchronous `dispatch_to_response`, so no `asyncio.gather` and no
  task per request. Each method it calls is a small synchronous wrapper that starts our async
  handler and hands the coroutine back through jsonrpcserver's `context` (a one-slot box); the
  dispatcher then awaits it. The wrapper carries a precomputed `__signature__`, so the
  argument check costs a bind, not a fresh `inspect.signature` walk per request.
* nothing jsonrpcserver produces reaches the wire. Errors we mean to send are `WireError`s; any
  other exception becomes the fixed internal-error sentence (`errors.to_wire_error`); anything
  jsonrpcserver answers on its own (its "Method not found", an internal error with `str(exc)`)
  is replaced by our own sentence. The endpoint encodes the answer.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from jsonrpcserver import Success, dispatch_to_response
from oslash.either import Left

from tether.child.errors import INTERNAL_MESSAGE, to_wire_error
from tether.protocol import ErrorCode, WireError

log = logging.getLogger("tether.child")

Handler = Callable[[Any], Awaitable[Any]]

_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter("context", inspect.Parameter.POSITIONAL_ONLY),
        inspect.Parameter("params", inspect.Parameter.POSITIONAL_ONLY),
    ]
)


class Dispatcher:
    def __init__(self, handlers: Mapping[str, Handler]) -> None:
        """`handlers` map a method name to an async callable taking the typed params."""
        self._methods = {name: _adapt(h) for name, h in handlers.items()}

    async def request(self, method: str, params: Any) -> Any:
        """Serve one request: its result, or `WireError` to answer with."""
        return await self._dispatch(method, params, is_request=True)

    async def notification(self, method: str, params: Any) -> None:
        """Serve one notification; its errors are logged, never answered."""
        try:
            await self._dispatch(method, params, is_request=False)
        except WireError as exc:
            log.warning("notification %s failed: %s", method, exc.message)

    async def _dispatch(self, method: str, params: Any, *, is_request: bool) -> Any:
        prepared: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": [params]}
        if is_request:
            prepared["id"] = 0  # jsonrpcserver needs one; the endpoint answers the real id
        started: list[Coroutine[Any, Any, Any]] = []
        response = dispatch_to_response(
            "",
            self._methods,
            context=started,
            deserializer=lambda _unused: prepared,
            validator=lambda decoded: decoded,
        )
        if isinstance(response, Left):
            for coro in started:
                coro.close()
            _refuse(response, method)
        if not started:
            if is_request:
                log.error("dispatch of %s called no handler", method)
                raise WireError(ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)
            return None
        try:
            return await started[0]
        except Exception as exc:
            raise to_wire_error(exc, method) from None


def _adapt(handler: Handler) -> Callable[..., Any]:
    def method(context: list[Coroutine[Any, Any, Any]], params: Any) -> Any:
        context.append(handler(params))  # type: ignore[arg-type]
        return Success(None)

    method.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
    return method


def _refuse(response: Any, method: str) -> None:
    """What jsonrpcserver refused on its own, as our own error (never its text)."""
    err = response._error
    if err.code == ErrorCode.METHOD_NOT_FOUND:
        raise WireError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")
    log.error("dispatch of %s failed inside jsonrpcserver: %r", method, err)
    raise WireError(ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)
