"""The `task` tool over MCP: the delegation layer's task tool, served by a `Delegator`.

The input schema is the task tool's own (`TaskTool.input_schema`: the `subagent_type` enum
from the definitions, the 80-character `description`, `prompt`, optional `readOnly` and
`forkContext`), its description the tool's delegation guidance; `TaskTool.json_schema()` is the
two put together. The output schema is `TaskOutput`'s, so a client can check the structured
content. The delegator validates the arguments (the SDK's low-level server does not) and
answers problems as a `TaskOutput` with `status: "error"`, as it answers every other outcome.

An answer is the `TaskOutput` as structured content plus a short text for clients (and
models) that read only text: the status, the summary or why it ended, the artifacts, the
changed files and the verification. Anything but `completed` (or a continuable sub-agent's
`needs_input`) is an error answer (`isError`): a sub-agent that crashed, was cut by a limit or
was refused did not do the work.

An MCP client is not an orchestrator child: the server has no transcript of the client's
conversation, so `forkContext: true` starts the sub-agent from its prompt alone.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tether.parent.delegation.delegator import Delegator
from tether.parent.delegation.output import TaskOutput
from tether.parent.mcp_server.progress import describe
from tether.parent.mcp_server.tools import Answer, CallContext, ServedTool
from tether.parent.run.subagent_events import SubagentEvent
from tether.parent.run.terminal import clean

TITLE = "Delegate to a tether sub-agent"
NOT_ERRORS = frozenset({"completed", "needs_input"})
"""Statuses that are not error answers."""


def task_tool(delegator: Delegator) -> ServedTool | None:
    """The `task` tool for `delegator`'s definitions, or `None` when it has none."""
    tool = delegator.tool
    if tool is None:
        return None

    async def call(arguments: dict[str, Any], ctx: CallContext) -> Answer:
        def progress(event: SubagentEvent) -> None:
            ctx.progress(describe(event))

        output = await delegator.execute(
            arguments, tool_call_id=f"mcp-{ctx.id}", on_event=progress, stops=ctx.stops
        )
        return answer(output)

    return ServedTool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        call=call,
        output_schema=output_schema(),
        title=TITLE,
        # A sub-agent may change the workspace (build mode) and is not repeatable.
        hints={"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    )


def answer(output: TaskOutput) -> Answer:
    """The MCP answer for one task call's outcome."""
    return Answer(summary_text(output), output.to_dict(), output.status not in NOT_ERRORS)


def summary_text(output: TaskOutput) -> str:
    """The short text beside the structured content (child words cleaned)."""
    who = f" ({output.subagent_id}, {output.steps} step{'s' if output.steps != 1 else ''})"
    lines = [f"{output.status}{who if output.subagent_id else ''}: {output.summary}"]
    if output.question:
        lines.append(f"question: {output.question}")
    elif output.status != "completed" and output.message and output.message not in output.summary:
        lines.append(f"why: {output.message}")
    for a in output.artifacts:
        lines.append(f"artifact: {a.path} ({a.fs_type}, {a.size} bytes)")
    for s in output.skipped:
        lines.append(f"skipped: {s.path}: {s.reason}")
    if output.changed_files:
        lines.append(f"changed: {', '.join(output.changed_files)}")
    if output.verification is not None:
        v = output.verification
        lines.append(f"verification: {v.verdict} after {v.fix_cycles} fix cycle(s)")
    return clean("\n".join(lines))


def output_schema() -> dict[str, Any]:
    """`TaskOutput`'s JSON Schema as one document whose root is the object itself (MCP wants
    `type: object` at the root; msgspec gives a `$ref` to it)."""
    schema = msgspec.json.schema(TaskOutput)
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    root = dict(defs.pop(TaskOutput.__name__))
    if defs:
        root["$defs"] = defs
    return root
