"""One-pass decoding of the usual messages, sans-I/O: a request or notification decoded
straight into its method's params Struct, a response straight into the result type of the
request it answers.

The two-step path (`codec.decode_line`: the envelope with `Raw` params/result, then
`methods.decode_params` / `decode_result`) scans every line twice, and the second scan of a
large message costs as much as the first. This module is only a quicker way to the same
events: whenever its single pass does not give a plain, valid message (a wrong `jsonrpc`, a
missing or null id, an unknown method or one of the wrong direction, params or a result that
do not fit, an error response, anything unusual), it answers `None` and the caller takes the
two-step path, which judges the line exactly as before. So what a receiver sees, error
messages included, does not depend on which path read a line.

How a line is typed in one pass:

* a request or notification: the receiving side's methods form a msgspec tagged union on the
  `method` member (wherever it stands in the object), each member typing `params` with the
  method's own Struct;
* a response: the request it answers is read from the line's head (`peek_id`: tether's encoder
  and most peers write `id` before `result`), and the line is decoded with a reply type whose
  `result` is that method's result type; the decoded id must be the peeked one.

The depth limit is the caller's: it checks a line (`exceeds_depth`) before handing it here.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from tether.protocol.methods import METHODS, MethodSpec

_HEAD = 256
"""How far into a line `peek_id` looks for the id (a reply's `id` comes in its first bytes)."""


def _incoming_type(spec: MethodSpec[Any, Any]) -> type[Struct]:
    # A method without params (shutdown, exit) is read in one pass only when it has none.
    params: Any = Raw if spec.params is None else spec.params
    return msgspec.defstruct(
        f"_In_{spec.name.replace('/', '_')}",
        [
            ("jsonrpc", str | UnsetType, UNSET),
            ("id", int | str | UnsetType | None, UNSET),
            ("params", params | UnsetType, UNSET),
            ("result", Raw | UnsetType, UNSET),
            ("error", Raw | UnsetType, UNSET),
        ],
        tag_field="method",
        tag=spec.name,
        frozen=True,
    )


def _reply_type(spec: MethodSpec[Any, Any]) -> type[Struct]:
    return msgspec.defstruct(
        f"_Reply_{spec.name.replace('/', '_')}",
        [
            ("jsonrpc", str | UnsetType, UNSET),
            ("id", int | str | UnsetType | None, UNSET),
            ("method", Raw | UnsetType, UNSET),
            ("result", spec.result | UnsetType, UNSET),
            ("error", Raw | UnsetType, UNSET),
        ],
        frozen=True,
    )


class IncomingDecoder:
    """One pass for the requests and notifications of one direction (`parent_to_child` is
    what a child receives)."""

    __slots__ = ("_decoder", "_specs")
    _specs: dict[type[Struct], MethodSpec[Any, Any]]

    def __init__(self, direction: str) -> None:
        specs = [s for s in METHODS.values() if s.direction == direction]
        self._specs = {_incoming_type(s): s for s in specs}
        types = tuple(self._specs)
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
            Union[types]  # noqa: UP007 (a runtime union of runtime-made types)
        )

    def decode(self, line: bytes | memoryview) -> tuple[str, Any, Any] | None:
        """`(method, id, params)` of a plain request (`id` is `UNSET` for a notification), or
        `None`: take the two-step path."""
        try:
            msg = self._decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        if msg.jsonrpc != "2.0" or msg.result is not UNSET or msg.error is not UNSET:
            return None
        spec = self._specs[type(msg)]
        rid = msg.id
        if spec.kind == "request":
            if rid is UNSET or rid is None:
                return None
        elif rid is not UNSET:
            return None
        params = msg.params
        if spec.params is None:
            if params is not UNSET:
                return None
            return spec.name, rid, None
        if params is UNSET:
            return None
        return spec.name, rid, params


_reply_decoders: dict[str, msgspec.json.Decoder[Any]] = {}


def decode_reply(line: bytes | memoryview, rid: Any, method: str) -> tuple[bool, Any]:
    """`(True, typed result)` when `line` is a plain success reply to request `rid` of
    `method`; `(False, None)`: take the two-step path."""
    dec = _reply_decoders.get(method)
    if dec is None:
        spec = METHODS.get(method)
        if spec is None or spec.kind != "request" or spec.result is None:
            return False, None
        dec = _reply_decoders[method] = msgspec.json.Decoder(_reply_type(spec))
    try:
        msg = dec.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False, None
    if (
        msg.jsonrpc != "2.0"
        or msg.method is not UNSET
        or msg.error is not UNSET
        or msg.result is UNSET
        or type(msg.id) is not type(rid)
        or msg.id != rid
    ):
        return False, None
    return True, msg.result


class _IdOnly(Struct):
    id: int | str | UnsetType | None = UNSET


_id_decoder = msgspec.json.Decoder(_IdOnly)


def peek_id(line: bytes) -> Any:
    """The `id` of a reply, read from the line's head (up to its first nested `{`/`[`), or
    `UNSET` when the head does not show one. A cut inside a string leaves that string open, so
    the decode fails and no wrong id is read; the caller checks the id again after decoding."""
    head = line[:_HEAD]
    cuts = [i for i in (head.find(b"{", 1), head.find(b"[", 1)) if i > 0]
    if not cuts or head[:1] != b"{":
        return UNSET
    try:
        got = _id_decoder.decode(head[: min(cuts)] + b"null}").id
    except (msgspec.DecodeError, msgspec.ValidationError):
        return UNSET
    return UNSET if got is None else got
