"""The one method table: every v1 method, who sends it, and its params/result types.

Typed decoding of params and results goes through this table and nowhere else. Each method is
also a typed constant (`AGENT_RUN: MethodSpec[AgentRunParams, RunResult]`), so a caller that
sends `AGENT_RUN` gets a `RunResult` back without any `Any` in between.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

import msgspec
from msgspec import Struct

from tether.protocol import messages as m

Kind = Literal["request", "notification"]
Direction = Literal["parent_to_child", "child_to_parent"]

P = TypeVar("P")
R = TypeVar("R")


class MethodSpec(Struct, Generic[P, R], frozen=True):
    name: str
    kind: Kind
    direction: Direction
    params: Any
    """Struct type of `params`; `None` when the method takes none."""
    result: Any
    """Type of `result` for requests (`None` for a `null` result); unused for notifications."""
    summary: str


INITIALIZE: MethodSpec[m.InitializeParams, m.InitializeResult] = MethodSpec(
    "initialize",
    "request",
    "parent_to_child",
    m.InitializeParams,
    m.InitializeResult,
    "Handshake and version negotiation; must be the first request.",
)
AGENT_RUN: MethodSpec[m.AgentRunParams, m.RunResult] = MethodSpec(
    "agent/run",
    "request",
    "parent_to_child",
    m.AgentRunParams,
    m.RunResult,
    "Start a run; the response is its RunResult, sent when the run ends.",
)
AGENT_MESSAGE: MethodSpec[m.AgentMessageParams, m.RunResult] = MethodSpec(
    "agent/message",
    "request",
    "parent_to_child",
    m.AgentMessageParams,
    m.RunResult,
    "Continue a finished continuable run with a new user message.",
)
AGENT_CANCEL: MethodSpec[m.AgentCancelParams, None] = MethodSpec(
    "agent/cancel",
    "notification",
    "parent_to_child",
    m.AgentCancelParams,
    None,
    "Cancel a run: its pending agent/run answers with status aborted.",
)
PING: MethodSpec[m.Empty, m.Empty] = MethodSpec(
    "ping", "request", "parent_to_child", m.Empty, m.Empty, "Liveness check."
)
SHUTDOWN: MethodSpec[None, None] = MethodSpec(
    "shutdown",
    "request",
    "parent_to_child",
    None,
    None,
    "Finish up (cancel runs) and answer null; `exit` follows.",
)
EXIT: MethodSpec[None, None] = MethodSpec(
    "exit", "notification", "parent_to_child", None, None, "Exit with status 0."
)
AGENT_EVENT: MethodSpec[m.AgentEventParams, None] = MethodSpec(
    "agent/event",
    "notification",
    "child_to_parent",
    m.AgentEventParams,
    None,
    "Progress of a run, numbered by a per-run increasing seq.",
)
MODEL_COMPLETE: MethodSpec[m.ModelCompleteParams, m.ModelCompleteResult] = MethodSpec(
    "model/complete",
    "request",
    "child_to_parent",
    m.ModelCompleteParams,
    m.ModelCompleteResult,
    "One model turn, brokered by the parent (credentials stay there).",
)
TOOL_CALL: MethodSpec[m.ToolCallParams, m.ToolCallResult] = MethodSpec(
    "tool/call",
    "request",
    "child_to_parent",
    m.ToolCallParams,
    m.ToolCallResult,
    "Call one of the run's parentTools; the parent runs it and answers its result.",
)
TOOL_APPROVE: MethodSpec[m.ToolApproveParams, m.ToolApproveResult] = MethodSpec(
    "tool/approve",
    "request",
    "child_to_parent",
    m.ToolApproveParams,
    m.ToolApproveResult,
    "Ask the parent's policy before a mutating tool runs.",
)

METHODS: dict[str, MethodSpec[Any, Any]] = {
    spec.name: spec
    for spec in (
        INITIALIZE,
        AGENT_RUN,
        AGENT_MESSAGE,
        AGENT_CANCEL,
        PING,
        SHUTDOWN,
        EXIT,
        AGENT_EVENT,
        MODEL_COMPLETE,
        TOOL_CALL,
        TOOL_APPROVE,
    )
}

_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def _decoder(tp: Any) -> msgspec.json.Decoder[Any]:
    dec = _decoders.get(tp)
    if dec is None:
        dec = _decoders[tp] = msgspec.json.Decoder(tp)
    return dec


def decode_params(method: str, raw: msgspec.Raw | None) -> Any:
    """Decode `params` of `method` into its Struct.

    Raises `KeyError` for an unknown method and `msgspec.ValidationError` /
    `msgspec.DecodeError` for params that do not fit; callers map those to error codes.
    """
    spec = METHODS[method]
    if spec.params is None:
        if raw is None or _decode(_decoder(Any), raw) in (None, {}, []):
            return None
        raise msgspec.ValidationError(f"{method} takes no params")
    if raw is None:
        raw = msgspec.Raw(b"{}")
    return _decode(_decoder(spec.params), raw)


def decode_result(method: str, raw: msgspec.Raw | None) -> Any:
    """Decode the `result` of a response to `method` into its declared type."""
    spec = METHODS[method]
    if spec.result is None:
        return None
    return _decode(_decoder(spec.result), raw if raw is not None else b"null")


def _decode(dec: msgspec.json.Decoder[Any], raw: msgspec.Raw | bytes) -> Any:
    # A Raw from `decode_line` is a slice of a line that passed the depth limit, so it nests less
    # deeply than that limit; the guard below only matters for a Raw made some other way.
    try:
        return dec.decode(raw)
    except RecursionError:
        # Too deeply nested for msgspec: report it like any other JSON it cannot decode.
        raise msgspec.DecodeError("JSON nested too deeply") from None
