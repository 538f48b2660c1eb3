"""`ask_orchestrator({question})`: a continuable run pauses to ask whoever delegated it.

A sub-agent cannot ask the user, but a continuable one can end its activation with a question:
the run answers `status: "needs_input"` with the question, its session is kept, and the answer
comes back as the next user message (`agent/message`). Only continuable runs have this tool.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from tether.child.tools.base import ToolContext, ToolOutcome, parse_arguments, schema_of

MAX_QUESTION_CHARS = 4_000


class AskArgs(Struct, frozen=True, forbid_unknown_fields=True):
    question: str
    """One precise question; say what you need to know and why."""


class AskOrchestratorTool:
    name = "ask_orchestrator"
    description = (
        "Stop and ask whoever delegated this task a question you cannot answer yourself. "
        "Your work so far is kept; the answer arrives as the next message. Ask only when you "
        "cannot go on without it."
    )
    input_schema = schema_of(AskArgs)
    mutates = False
    continuable_only = True

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(AskArgs, arguments)
        question = args.question.strip()[:MAX_QUESTION_CHARS]
        if not question:
            return ToolOutcome(content="the question is empty", is_error=True)
        return ToolOutcome(content="asked; waiting for the answer", question=question)
