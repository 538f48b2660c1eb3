"""What a trace holds: one JSON object per line, each a `TraceLine` with its `kind`.

A trace is written by the parent, never by the child: every `model/complete` its broker served
for the run (the exact request and the exact response, or the error), the run's follow-up
messages and results, and — marked `"source": "child"` — the tool calls and results the child
*reported* in its events (the parent did not run those tools and cannot vouch for them).
`schema.json` beside this module is the JSON Schema of one line, generated from these Structs
and checked in (`python -m tether.parent.trace.schema > parent/trace/schema.json`); a test
fails when it drifts. docs/traces.md describes every kind.

Times: `wall` is `time.time()` (seconds since the epoch), `mono` is the parent's
`time.monotonic()`: comparable between the lines of one process, not across processes.
A newer trace may add fields (readers ignore what they do not know) but never changes one;
`traceVersion` in the header changes when that promise is broken.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Struct, field

from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteResult,
    RunResult,
    ToolCallResult,
    ToolSpec,
)

TRACE_VERSION = 1

Purpose = Literal["turn", "compaction"]
Slot = Literal["main", "compaction"]
"""Which of the run's models the parent chose for a call: the run's own (`main`) or its
definition's compaction model."""


class _Line(Struct, frozen=True, kw_only=True, rename="camel", tag_field="kind"):
    run_id: str
    """The run this line belongs to (a continuable agent's file holds several runs)."""
    wall: float
    """`time.time()` when it happened (a call: when the request arrived)."""
    mono: float
    """The parent's `time.monotonic()` at the same instant."""


class Header(_Line, frozen=True, kw_only=True, tag="header"):
    """The first line of a run's part of the file: what the run was asked to do."""

    trace_version: int = TRACE_VERSION
    tether_version: str
    protocol_version: int
    parent_run_id: str | None = None
    """The run that started this one: an orchestrator's, for its sub-agents."""
    agent_id: str | None = None
    """The continuable agent a cold resume continues (its first run names it in an `agent`
    line, once the agent exists)."""
    agent: str
    """The role name, the `module:callable` of a custom agent (file paths absolute), or the
    definition's type when the caller gave a definition."""
    definition: AgentDefinition
    """The definition the child was sent."""
    prompt: str
    description: str = ""
    history: list[ChatMessage] = field(default_factory=list)
    """The transcript the run started from (a fork's, a cold resume's)."""
    parent_tools: list[ToolSpec] = field(default_factory=list)
    """Tools the parent served the run itself (an orchestrator's `task`)."""
    workspace: str
    model: str | None = None
    """The model string the run's own turns went to (`null`: a provider object without one)."""
    compaction_model: str | None = None
    provider: str
    """What carried the run: `spawn`, `fork`, `inprocess`, `acp`, ..."""
    labels: dict[str, str] = field(default_factory=dict)
    """What the caller named the run (a task's `toolCallId`, its `subagentId`)."""
    orchestration: dict[str, Any] | None = None
    """For an orchestrator: how it was started (its sub-agents' definitions, limits of the
    delegation), which `tether replay` needs to start it again."""


class TurnRequest(Struct, frozen=True, kw_only=True, rename="camel"):
    """A `model/complete` request as the child sent it (its `runId` is the line's)."""

    model: str | None = None
    """The model the child named (`null`: the run's own)."""
    messages: list[ChatMessage]
    tools: list[ToolSpec] = field(default_factory=list)


class TurnError(Struct, frozen=True, kw_only=True, rename="camel"):
    code: int
    """The JSON-RPC error code the child got (`MODEL_ERROR`, `BUDGET_EXHAUSTED`, ...)."""
    message: str
    by: Literal["model", "parent"]
    """`model`: the provider failed; `parent`: the parent refused the call before any model
    saw it (a budget, a model this run may not use). A replay answers the first kind again
    and expects the parent to refuse the second by itself."""


class Turn(_Line, frozen=True, kw_only=True, tag="turn"):
    """One brokered `model/complete`: the exact request, and the exact answer or the error."""

    index: int
    """1 for the run's first call, counting every call the child made (compaction too)."""
    activation: int = 0
    """0 for the run's prompt, 1 for its first follow-up message, ..."""
    purpose: Purpose = "turn"
    slot: Slot | None = None
    """Which of the run's models answered (`null` when the parent refused before choosing)."""
    model: str | None = None
    """The model string the parent resolved for the call (`null`: none, or a provider object
    without a name)."""
    request: TurnRequest
    response: ModelCompleteResult | None = None
    """The answer the child got, usage as the parent counted it."""
    error: TurnError | None = None
    seconds: float = 0.0
    """From the request's arrival to its answer."""


class ChildReport(_Line, frozen=True, kw_only=True, tag="child_event"):
    """A `tool_call` or `tool_result` event, as the child reported it: the parent relays it and
    cannot vouch for it."""

    source: Literal["child"] = "child"
    event: Literal["tool_call", "tool_result"]
    seq: int
    """The child's own event number."""
    data: dict[str, Any] = field(default_factory=dict)


class ParentToolCall(_Line, frozen=True, kw_only=True, tag="parent_tool"):
    """A tool the parent served the run (`tool/call`, e.g. an orchestrator's `task`): the
    parent ran it, so this is the parent's record. A sub-agent it started names this run in
    its header (`parentRunId`) and the call in `labels.toolCallId`."""

    name: str
    call_id: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    result: ToolCallResult | None = None
    error: TurnError | None = None
    seconds: float = 0.0


class Approval(_Line, frozen=True, kw_only=True, tag="approval"):
    """A `tool/approve` the child asked, and what the parent's policy answered."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    allow: bool
    reason: str = ""


class FollowUp(_Line, frozen=True, kw_only=True, tag="message"):
    """A follow-up message to a continuable run: a new activation starts."""

    activation: int
    text: str


class Outcome(_Line, frozen=True, kw_only=True, tag="result"):
    """How an activation ended, as the parent built the result."""

    activation: int = 0
    result: RunResult


class AgentBound(_Line, frozen=True, kw_only=True, tag="agent"):
    """The run became a continuable agent: its follow-ups append to this file."""

    agent_id: str


class Stopped(_Line, frozen=True, kw_only=True, tag="stopped"):
    """Tracing of this run stopped here, and why; the run itself went on. The result's
    `trace.stopped` says the same."""

    reason: str
    bytes: int
    """The file's size when tracing stopped."""


TraceLine = (
    Header
    | Turn
    | ChildReport
    | ParentToolCall
    | Approval
    | FollowUp
    | Outcome
    | AgentBound
    | Stopped
)
KINDS: tuple[type[_Line], ...] = TraceLine.__args__
"""Every line type, in the order docs/traces.md describes them."""

_decoder: msgspec.json.Decoder[TraceLine] = msgspec.json.Decoder(TraceLine)
_encoder = msgspec.json.Encoder()


def encode(line: _Line) -> bytes:
    """One line, `\\n`-terminated."""
    return _encoder.encode(line) + b"\n"


def decode(data: bytes | str) -> TraceLine:
    """One line as its Struct; raises `msgspec.ValidationError` or `msgspec.DecodeError`."""
    return _decoder.decode(data)


def kind_of(line: type[_Line] | _Line) -> str:
    """The `kind` a line type is written with."""
    cls = line if isinstance(line, type) else type(line)
    return str(cls.__struct_config__.tag)
