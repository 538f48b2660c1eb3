"""`complete({summary, paths})`: the agent declares its task done and names what it delivered.

Each claimed path is checked (exists, under the workspace root); valid ones become artifacts,
the rest are reported as skipped with the reason, so the parent never receives a path it cannot
read back.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field

from tether.child.tools.base import (
    Completion,
    ToolContext,
    ToolOutcome,
    parse_arguments,
    schema_of,
)
from tether.protocol.messages import Artifact, SkippedPath


class CompleteArgs(Struct, frozen=True, forbid_unknown_fields=True):
    summary: str
    """What was done and found, for whoever delegated the task."""
    paths: list[str] = field(default_factory=list)
    """Files or directories delivered, relative to the workspace or absolute inside it."""


class CompleteTool:
    name = "complete"
    description = (
        "Finish the task. Give a summary of what you did and found, and the paths of any "
        "files you created or changed for the requester. Call this exactly once, last."
    )
    input_schema = schema_of(CompleteArgs)
    mutates = False

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(CompleteArgs, arguments)
        artifacts: list[Artifact] = []
        skipped: list[SkippedPath] = []
        for path in args.paths:
            described = ctx.workspace.describe(path)
            if isinstance(described, Artifact):
                artifacts.append(described)
            else:
                skipped.append(described)
        note = f"completed with {len(artifacts)} artifact(s)"
        if skipped:
            note += "; skipped: " + "; ".join(f"{s.path} ({s.reason})" for s in skipped)
        return ToolOutcome(
            content=note,
            completion=Completion(summary=args.summary, artifacts=artifacts, skipped=skipped),
        )
