"""Dispatch of the parent's requests and notifications through jsonrpcserver.

This is the only module that imports jsonrpcserver; its types never leave it. The division of
labour:

* the wire's `Connection` does all decoding: framing, the envelope, and the typed params from
  the method table. The deserializer we hand jsonrpcserver returns an already-prepared request
  (the string argument is unused) whose single positional param is the typed params Struct, and
  the validator accepts it as is; jsonrpcserver's json.loads and JSON-Schema check never run.
* jsonrpcserver does the method lookup, the call, and the notification rule (no response).
* nothing jsonrpcserver produces reaches the wire. A handler's result and every error we mean
  to send are wrapped in `_Ours`; `_finish` unwraps only those and turns anything else (its own
  "Method not found", an internal error with `str(exc)`) into our fixed sentence. The endpoint
  encodes the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from jsonrpcserver import JsonRpcError, Success, async_dispatch_to_response
from oslash.either import Left

from tether.child.errors import INTERNAL_MESSAGE, to_wire_error
from tether.protocol import ErrorCode, WireError

log = logging.getLogger("tether.child")

Handler = Callable[[Any], Awaitable[Any]]


class _Ours:
    """Marks a result or error data as produced by our code, so `_finish` may pass it on."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Dispatcher:
    def __init__(self, handlers: Mapping[str, Handler]) -> None:
        """`handlers` map a method name to an async callable taking the typed params."""
        self._methods = {name: _adapt(name, h) for name, h in handlers.items()}

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
        response = await async_dispatch_to_response(
            "",
            self._methods,
            deserializer=lambda _unused: prepared,
            validator=lambda decoded: decoded,
        )
        if response is None:
            return None  # a notification: jsonrpcserver answers nothing, by the rule
        return _finish(response, method)


def _adapt(name: str, handler: Handler) -> Callable[..., Any]:
    async def method(params: Any) -> Any:
        try:
            result = await handler(params)
        except Exception as exc:
            err = to_wire_error(exc, name)
            raise JsonRpcError(int(err.code), err.message, _Ours(err.data)) from None
        return Success(_Ours(result))

    return method


def _finish(response: Any, method: str) -> Any:
    """post_process, in effect: our handler's result, or the `WireError` it meant to send."""
    if isinstance(response, Left):
        err = response._error
        if isinstance(err.data, _Ours):
            raise WireError(err.code, err.message, err.data.value)
        if err.code == ErrorCode.METHOD_NOT_FOUND:
            raise WireError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")
        log.error("dispatch of %s failed inside jsonrpcserver: %r", method, err)
        raise WireError(ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)
    ok = response._value
    if isinstance(ok.result, _Ours):
        return ok.result.value
    log.error("dispatch of %s returned a result not made by a handler", method)
    raise WireError(ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)
