"""What goes wrong on the parent's side of a request reaches the child as a clean error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.config import ChildConfig
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import (
    AgentDefinition,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolApproveParams,
    ToolApproveResult,
)

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""


class BrokenModel:
    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        raise KeyError("secret-internal-detail")


@pytest.mark.in_memory
async def test_a_provider_that_raises_fails_the_run_with_the_class_name_only(
    tmp_path: Path,
) -> None:
    async with Supervisor(IN_MEMORY) as sup:
        result = await sup.run("go", workspace=tmp_path, model=BrokenModel())
    assert not result.success
    assert result.failure is not None and result.failure.kind == "agent_error"
    assert "the model provider failed: KeyError" in result.message
    assert "secret-internal-detail" not in result.message


@pytest.mark.in_memory
async def test_an_approval_policy_that_raises_is_a_denial_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    script = """[
      {"text": "", "toolCalls": [{"name": "write_file",
        "arguments": {"path": "x.txt", "content": "x"}}]},
      {"text": "done", "toolCalls": [{"name": "complete",
        "arguments": {"summary": "gave up on writing", "paths": []}}]}
    ]"""

    def policy(params: ToolApproveParams) -> ToolApproveResult:
        raise RuntimeError("policy bug with private detail")

    async with Supervisor(IN_MEMORY) as sup:
        result = await sup.run(
            "go",
            workspace=tmp_path,
            agent=AgentDefinition(type="general"),
            model=ScriptedModel.from_json(script),
            approve=policy,
        )
    assert result.success, result
    assert result.summary == "gave up on writing"
    assert not (tmp_path / "x.txt").exists()
