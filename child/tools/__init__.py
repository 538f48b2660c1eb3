"""The tools a run may call, and the registry that picks a run's set.

To add a tool: write a class satisfying `base.Tool` in a module of its own in this package
(`complete.py` is the smallest example), then add an instance in `default_tools()`. A definition's
`tools` list and its read-only flag narrow the set per run through `ToolRegistry.select`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tether.child.tools.ask import AskOrchestratorTool
from tether.child.tools.base import (
    Completion,
    Tool,
    ToolContext,
    ToolInputError,
    ToolOutcome,
    parse_arguments,
    schema_of,
)
from tether.child.tools.bash import BashTool
from tether.child.tools.complete import CompleteTool
from tether.child.tools.edit_file import EditFileTool
from tether.child.tools.glob import GlobTool
from tether.child.tools.grep import GrepTool
from tether.child.tools.list_dir import ListDirTool
from tether.child.tools.parent_tool import ParentTool
from tether.child.tools.read_file import ReadFileTool
from tether.child.tools.report import ReportTool
from tether.child.tools.write_file import WriteFileTool
from tether.protocol.messages import ToolSpec

COMPLETE = "complete"
_SELECTIONS_KEPT = 64
"""Distinct `select` answers remembered (a child meets a handful of definitions)."""


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._selected: dict[tuple[tuple[str, ...] | None, bool, bool], dict[str, Tool]] = {}
        """`select`'s answers so far (each run of a definition asks the same question)."""
        for tool in tools:
            self.register(tool)

    @classmethod
    def _of(cls, tools: dict[str, Tool]) -> ToolRegistry:
        """A registry holding a copy of `tools` (already checked for duplicate names)."""
        out = cls()
        out._tools = dict(tools)
        return out

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._selected.clear()

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def select(
        self, names: list[str] | None, *, read_only: bool, continuable: bool = False
    ) -> ToolRegistry:
        """The set one run gets: the named tools (all when `None`), minus mutating tools in
        explore mode, minus the tools only continuable runs have (`continuable_only`) unless
        the run is one. `complete` is always kept: without it a run could only end by budget.
        Unknown names are ignored; the parent's definition may list tools another child has.
        """
        key = (None if names is None else tuple(names), read_only, continuable)
        chosen = self._selected.get(key)
        if chosen is None:
            if len(self._selected) >= _SELECTIONS_KEPT:
                self._selected.clear()
            wanted = None if names is None else {*names, COMPLETE, *CONTINUABLE_TOOLS}
            chosen = self._selected[key] = {
                t.name: t
                for t in self._tools.values()
                if (wanted is None or t.name in wanted)
                and not (read_only and t.mutates)
                and (continuable or not getattr(t, "continuable_only", False))
            }
        # A copy: a run that registers a tool of its own changes only its own set.
        return ToolRegistry._of(chosen)

    def with_parent_tools(self, specs: Iterable[ToolSpec]) -> ToolRegistry:
        """This set plus the run's parent tools; a parent tool never shadows the child's own."""
        out = ToolRegistry._of(self._tools)
        for spec in specs:
            if spec.name not in out._tools:
                out.register(ParentTool(spec))
        return out

    def specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(name=t.name, description=t.description, input_schema=t.input_schema)
            for t in self._tools.values()
        ]


CONTINUABLE_TOOLS = ("report", "ask_orchestrator")
"""Tools only a continuable run gets."""


def default_tools() -> ToolRegistry:
    """The runtime's full tool set."""
    return ToolRegistry(
        [
            ReadFileTool(),
            ListDirTool(),
            GlobTool(),
            GrepTool(),
            WriteFileTool(),
            EditFileTool(),
            BashTool(),
            CompleteTool(),
            ReportTool(),
            AskOrchestratorTool(),
        ]
    )


__all__ = [
    "COMPLETE",
    "Completion",
    "Tool",
    "ToolContext",
    "ToolInputError",
    "ToolOutcome",
    "ToolRegistry",
    "default_tools",
    "parse_arguments",
    "schema_of",
]
