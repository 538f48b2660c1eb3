"""In-process tool calls: a minimal `ToolContext` over a real workspace directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.child.tools import default_tools
from tether.child.tools.base import ToolOutcome
from tether.child.workspace import Workspace
from tether.protocol.messages import ToolApproveResult

TOOLS = default_tools()


class FakeContext:
    def __init__(self, root: Path, *, read_only: bool = False) -> None:
        self.workspace = Workspace(root)
        self.run_id = "test-run"
        self.read_only = read_only
        self.asked: list[str] = []

    async def approve(self, tool: str, arguments: Mapping[str, Any]) -> ToolApproveResult:
        self.asked.append(tool)
        return ToolApproveResult(allow=True)


async def call(root: Path, tool: str, **arguments: Any) -> ToolOutcome:
    found = TOOLS.get(tool)
    assert found is not None, tool
    return await found.run(FakeContext(root), arguments)
