"""The tools an MCP server offers, as plain values: the seam between tether's tools and the MCP
SDK (this module does not import it).

A `ServedTool` is a name, what a client is shown (description, input schema, optionally an
output schema, a title and hints), and `call(arguments, ctx)`: an async function from the
client's arguments to an `Answer`. A call validates its own arguments (the low-level SDK
server does not check them against the schema) and answers every problem as an `Answer`
with `is_error`, never by raising; the server turns an exception into an error answer anyway.
`ctx.progress(line)` sends one line of progress when the client asked for progress, and does
nothing otherwise; `ctx.stops` is where a call adds the runs it starts, so a cancelled call
stops them all at once and the server can measure the stop (`tether.parent.run.stop`).

`from_parent_tool(tool)` serves a `ParentTool` (what a run's child may call in its parent, such
as continuable children's `send_message` and `list_agents`) as an MCP tool: its arguments are
checked against its schema first, and its result's JSON object, when it is one, becomes the
structured content.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from tether.parent.run.broker import ParentTool
from tether.parent.run.stop import StopLine
from tether.protocol.messages import ToolCallParams

MCP_RUN_ID = "mcp"
"""The run id a parent tool sees for a call that came from an MCP client."""


@dataclass(frozen=True)
class Answer:
    """What a tool call gives back: `text` for any client, `structured` (a JSON object) for
    clients that read structured content, and whether the call failed."""

    text: str
    structured: dict[str, Any] | None = None
    is_error: bool = False


def _no_progress(line: str) -> None:
    pass


@dataclass(frozen=True)
class CallContext:
    """One call, as its tool sees it."""

    id: str
    """The server's id for this call (unique while the server runs)."""
    progress: Callable[[str], None] = _no_progress
    """Send one line of progress to the client (a no-op when it asked for none)."""
    stops: StopLine = field(default_factory=StopLine)
    """The runs the call started, which a cancellation of the call stops (`run/stop.py`)."""


ToolCall = Callable[[dict[str, Any], CallContext], Awaitable[Answer]]


@dataclass(frozen=True)
class ServedTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    call: ToolCall
    output_schema: dict[str, Any] | None = None
    """The schema of `Answer.structured`; MCP clients check a successful answer against it."""
    title: str | None = None
    hints: dict[str, bool] = field(default_factory=dict)
    """MCP tool annotations: readOnlyHint, destructiveHint, idempotentHint, openWorldHint."""


def from_parent_tool(tool: ParentTool, *, hints: dict[str, bool] | None = None) -> ServedTool:
    """Serve `tool` over MCP (see the module docstring)."""
    spec = tool.spec
    schema = dict(spec.input_schema) or {"type": "object"}
    validator = jsonschema.Draft202012Validator(schema)

    async def call(arguments: dict[str, Any], ctx: CallContext) -> Answer:
        problems = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        if problems:
            text = "; ".join(_problem(e) for e in problems)
            body = {"status": "error", "error": "invalid_arguments", "message": text}
            return Answer(f"Invalid arguments: {text}.", body, is_error=True)
        result = await tool.call(
            ToolCallParams(run_id=MCP_RUN_ID, name=spec.name, arguments=arguments, call_id=ctx.id)
        )
        return Answer(result.content, _json_object(result.content), is_error=result.is_error)

    return ServedTool(
        name=spec.name,
        description=spec.description,
        input_schema=schema,
        call=call,
        hints=dict(hints or {}),
    )


def _problem(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.path)
    return f"{where}: {error.message}" if where else error.message


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
