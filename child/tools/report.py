"""`report({text})`: a continuable run tells its orchestrator something before it is done.

The finding goes to the parent at once as a `report` event (the parent keeps it with the
agent's session); the run goes on. Only continuable runs have this tool.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from tether.child.tools.base import ToolContext, ToolOutcome, parse_arguments, schema_of

MAX_REPORT_CHARS = 16_000


class ReportArgs(Struct, frozen=True, forbid_unknown_fields=True):
    text: str
    """The finding, self-contained: the orchestrator reads it without your transcript."""


class ReportTool:
    name = "report"
    description = (
        "Send an interim finding to whoever delegated this task, while you keep working. "
        "Use it for results they can act on before you finish; do not use it instead of "
        "complete."
    )
    input_schema = schema_of(ReportArgs)
    mutates = False
    continuable_only = True

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(ReportArgs, arguments)
        text = args.text[:MAX_REPORT_CHARS]
        await ctx.emit("report", {"text": text, "truncated": len(args.text) > len(text)})
        return ToolOutcome(content="reported")
