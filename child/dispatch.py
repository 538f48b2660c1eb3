"""Dispatch of incoming requests and notifications through jsonrpcserver.

This is the only module that imports jsonrpcserver; its types never leave it. The division of
labour:

* msgspec does all decoding. The envelope was decoded and validated by
  `tether.protocol.Decoder` before we get here, so the deserializer we hand jsonrpcserver
  returns that already-decoded request (the string argument is unused) and the validator
  accepts it as is; jsonrpcserver's json.loads and JSON-Schema check never run.
* jsonrpcserver does the method lookup, the call, and the notification rule (no response).
  Each method receives the still-raw params, and our wrapper decodes them with
  `tether.protocol.decode_params` (the method table) into the handler's Struct.
* nothing jsonrpcserver writes reaches the wire. Every error we mean to send is raised as a
  `JsonRpcError` whose data is wrapped in `_Ours`; `_finish` encodes only those verbatim and
  replaces anything else (its own "Method not found" with the method name as data, an internal
  error with `str(exc)`) with our own sentence.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import msgspec
from jsonrpcserver import JsonRpcError, Success, async_dispatch_to_response
from oslash.either import Left

from tether.child.errors import INTERNAL_MESSAGE, to_wire_error
from tether.protocol import (
    ErrorCode,
    Notification,
    Request,
    decode_params,
    encode_error,
    encode_response,
)

log = logging.getLogger("tether.child")

Handler = Callable[[Any], Awaitable[Any]]
Gate = Callable[[str], None]

_json = msgspec.json.Encoder()


class _Ours:
    """Marks a result or error data as produced by our code, so `_finish` may send it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Dispatcher:
    def __init__(self, handlers: Mapping[str, Handler], gate: Gate) -> None:
        """`handlers` map a method name to an async callable taking the typed params; `gate`
        raises to refuse a method in the current lifecycle state."""
        self._methods = {name: _adapt(name, h, gate) for name, h in handlers.items()}

    async def handle(self, msg: Request | Notification) -> bytes | None:
        """Run one request or notification; return the encoded response line, if any."""
        prepared: dict[str, Any] = {"jsonrpc": "2.0", "method": msg.method, "params": [msg.params]}
        if isinstance(msg, Request):
            prepared["id"] = msg.id
        line = await async_dispatch_to_response(
            "",
            self._methods,
            deserializer=lambda _unused: prepared,
            validator=lambda decoded: decoded,
            post_process=lambda response: _finish(response, msg),
        )
        # `_finish` made every response a line; a notification yields None.
        return cast(bytes | None, line)


def _adapt(name: str, handler: Handler, gate: Gate) -> Callable[..., Any]:
    async def method(raw: msgspec.Raw | None) -> Any:
        try:
            gate(name)
            params = decode_params(name, raw)
            result = await handler(params)
            # Encode here, inside the handler's error mapping: a result that cannot be encoded
            # is answered as an internal error to the right id.
            encoded = msgspec.Raw(_json.encode(result))
        except Exception as exc:
            err = to_wire_error(exc, name)
            raise JsonRpcError(int(err.code), err.message, _Ours(err.data)) from None
        return Success(_Ours(encoded))

    return method


def _finish(response: Any, msg: Request | Notification) -> bytes:
    """post_process: turn jsonrpcserver's response into our own encoded line.

    The id comes from the message we dispatched, not from the library's response: its own
    failure path answers with a null id, which would leave the parent's request hanging.
    """
    rid = msg.id if isinstance(msg, Request) else None
    if isinstance(response, Left):
        err = response._error
        if isinstance(err.data, _Ours):
            return encode_error(rid, err.code, err.message, err.data.value)
        if err.code == ErrorCode.METHOD_NOT_FOUND:
            return encode_error(rid, ErrorCode.METHOD_NOT_FOUND, f"Method not found: {msg.method}")
        log.error("dispatch of %s failed inside jsonrpcserver: %r", msg.method, err)
        return encode_error(rid, ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)
    ok = response._value
    if isinstance(ok.result, _Ours):
        return encode_response(ok.id, ok.result.value)
    log.error("dispatch of %s returned a result not made by a handler", msg.method)
    return encode_error(rid, ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)
