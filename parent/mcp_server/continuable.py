"""`tether mcp --continuable`: task sub-agents that can be continued, and the tools that do it.

Each task call's sub-agent starts as a continuable agent of the server's supervisor
(`SupervisorRunner` with a keep-alive): a durable session in the state directory, its child kept
alive for the keep-alive after each answer. The `task` answer's `subagentId` is then the
agent's id, and a sub-agent that stops to ask (`ask_orchestrator`) comes back as `status:
"needs_input"` with its `question`. The server adds `send_message` (answer it, or ask for
more: warm in its live child, cold from its stored transcript once the child is gone) and
`list_agents`, both `ParentTool`s served over MCP with `from_parent_tool`.

The tools reach only the agents this server started: every agent is created under one parent
run, `mcp-<random>`, named once per server on stderr; `tether agents list --parent-run ...`
finds them later. The model of a sub-agent is the server's choice as for any task call: its
definition's model, else `--model`; a definition that names another provider (`acp`, ...)
runs once, as without `--continuable`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tether.parent.agents.service import agents_of
from tether.parent.agents.tools import (
    LIST_AGENTS,
    SEND_MESSAGE,
    SEND_MESSAGE_SPEC,
    list_agents_tool,
)
from tether.parent.delegation.runner import SupervisorRunner
from tether.parent.mcp_server.tools import ServedTool, from_parent_tool

if TYPE_CHECKING:
    from tether.parent.delegation.delegator import Delegator
    from tether.parent.models import ModelProvider
    from tether.parent.process.config import ChildConfig
    from tether.parent.process.limits import Limits
    from tether.parent.run.core import SupervisorCore
    from tether.parent.run.spec import NamedModel


HINTS: dict[str, dict[str, bool]] = {
    SEND_MESSAGE: {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    LIST_AGENTS: {"readOnlyHint": True, "idempotentHint": True},
}
"""MCP tool hints: a message resumes a sub-agent that may change the workspace; a listing
changes nothing."""


def parent_run() -> str:
    """A fresh name for the agents of one server."""
    return f"mcp-{secrets.token_hex(4)}"


def continuable(
    sup: SupervisorCore,
    *,
    under: str,
    keep_alive: float | str,
    default_model: NamedModel | ModelProvider | None,
    models: Mapping[str, ModelProvider],
    limits: Limits | None,
    config: ChildConfig | None,
    workspace: str | os.PathLike[str] = ".",
) -> SupervisorRunner:
    """The delegation runner of a continuable server: each task's sub-agent a continuable
    agent under `under` (see above)."""
    return SupervisorRunner(
        sup,
        default_model=default_model,
        models=models,
        workspace=workspace,
        limits=limits,
        config=config,
        keep_alive=keep_alive,
        parent_run=under,
    )


def continuation_tools(
    delegator: Delegator, sup: SupervisorCore, *, under: str
) -> list[ServedTool]:
    """`send_message` (a follow-up through the delegator's gate, like a task call) and
    `list_agents` (the agents under `under`), as MCP tools."""
    tools = [
        delegator.message_tool(SEND_MESSAGE_SPEC),
        list_agents_tool(agents_of(sup), parent_run=under),
    ]
    return [from_parent_tool(tool, hints=HINTS[tool.spec.name]) for tool in tools]
