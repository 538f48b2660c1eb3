"""A tool the parent serves for this run (delegation's `task`, say): offered to the model like
any other, run by the parent through `tool/call`.

The parent decides which parent tools a run gets (`AgentRunParams.parentTools`); the child only
forwards the call and hands the model the parent's answer. Such a tool never touches the
workspace from here, so it needs no approval and explore mode does not deny it, and calls of
parent tools in one model turn may overlap (`concurrent`: the loop runs consecutive ones at the
same time; the parent orders what they do).
"""

from __future__ import annotations

from typing import Any

from tether.child.tools.base import ToolContext, ToolOutcome
from tether.protocol.messages import ToolSpec


class ParentTool:
    mutates = False
    concurrent = True

    def __init__(self, spec: ToolSpec) -> None:
        self.name = spec.name
        self.description = spec.description
        self.input_schema = dict(spec.input_schema)

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        return await ctx.call_parent_tool(self.name, arguments)
