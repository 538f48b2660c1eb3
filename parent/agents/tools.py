"""What a model gets to work with continuable agents: `send_message` and `list_agents` as tools
the parent serves (`ParentTool`), over a supervisor's `Agents`.

In a delegation (an orchestration, `tether mcp --continuable`) `send_message` is the
delegator's instead (`Delegator.message_tool`): a follow-up there is a delegated run, through
the same gate as a task call (budget, admission, diff, verifier, ledger, events). The tools
here are for a model that continues agents outside a delegation; both share this module's
specs, argument checks and answers.

The tools follow the task tool's discipline: whatever goes wrong — arguments that are not what
the schema says, a garbled or unknown id, an agent busy in another process, one that cannot be
resumed here, a spent budget — comes back as a result the model reads (`isError: true`, a JSON
object with `status: "error"`, an `error` code and a `message`), never as an exception. A
message that reached the agent comes back as its answer, whatever it was (`status` as the
task tool reports it, or `needs_input` with the `question` the agent asks).

    tools = agent_tools(sup.agents, parent_run="orchestration-1")
    handle = await sup.start(prompt, parent_tools=[task_tool, *tools], ...)

With `parent_run`, the tools see and reach only the agents started under that name
(`spawn_agent(parent_run=...)`).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from tether.parent.agents.service import (
    AgentBusy,
    AgentError,
    Agents,
    CannotResume,
)
from tether.parent.agents.sessions import AGENT_STATUSES, AgentSummary, BadAgentId
from tether.parent.models import ModelProvider
from tether.parent.run.broker import ParentTool
from tether.protocol.messages import RunResult, ToolCallParams, ToolCallResult, ToolSpec

SEND_MESSAGE = "send_message"
LIST_AGENTS = "list_agents"
LISTED_SUMMARY_CHARS = 1000
"""A listed agent's last summary is cut here (`send_message` answers carry it whole)."""
LISTED_MAX = 50

SEND_MESSAGE_SPEC = ToolSpec(
    name=SEND_MESSAGE,
    description=(
        "Send a message to a sub-agent you started earlier and wait for its answer. It goes on "
        "from where it stopped, with everything it did and read so far: use it to answer a "
        "sub-agent that asked you a question (status needs_input), to ask for more on the same "
        "work, or to correct it. The agent_id is the subagentId of a task result, or an id "
        "from list_agents. Write the message as you would to a colleague who knows the task."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "agent_id": {
                "type": "string",
                "description": "The sub-agent's id, like ag_0123456789abcdef0123.",
            },
            "message": {
                "type": "string",
                "minLength": 1,
                "description": "What you tell or ask it.",
            },
        },
        "required": ["agent_id", "message"],
        "additionalProperties": False,
    },
)

LIST_AGENTS_SPEC = ToolSpec(
    name=LIST_AGENTS,
    description=(
        "List the sub-agents you started that can be continued with send_message: id, type, "
        "label, status (idle: answered; needs_input: waiting for your answer to its question; "
        "running; failed; aborted; interrupted), its last summary, the tokens it used, and the "
        "question it asks when it needs input."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "status": {
                "type": "string",
                "enum": [s for s in AGENT_STATUSES if s != "closed"],
                "description": "Only the agents in this status.",
            },
        },
        "additionalProperties": False,
    },
)


def agent_tools(
    agents: Agents,
    *,
    parent_run: str | None = None,
    wait: float = 0.0,
    model: str | ModelProvider | None = None,
) -> list[ParentTool]:
    """`send_message` and `list_agents` over `agents` (see the module docstring). `wait`: how
    long a message waits for another process to let an agent go; `model`: the model for a
    cold resume when the agent's own is not known here."""
    return [
        send_message_tool(agents, parent_run=parent_run, wait=wait, model=model),
        list_agents_tool(agents, parent_run=parent_run),
    ]


def send_message_tool(
    agents: Agents,
    *,
    parent_run: str | None = None,
    wait: float = 0.0,
    model: str | ModelProvider | None = None,
) -> ParentTool:
    async def call(params: ToolCallParams) -> ToolCallResult:
        args = params.arguments
        problem = check_arguments(args, required={"agent_id": str, "message": str})
        if problem is None and not args["message"].strip():
            problem = "message: must not be empty or blank"
        if problem is not None:
            return refused_result("invalid_arguments", f"Invalid arguments: {problem}.")
        agent_id = args["agent_id"]
        try:
            if parent_run is not None:
                store = await agents.store()
                summary = await store.get(agent_id)
                if summary is None or summary.parent_run != parent_run:
                    return refused_result(
                        "unknown_agent",
                        f"No sub-agent {agent_id.strip()[:40]!r} among yours (list_agents shows "
                        "them).",
                    )
            result = await agents.send(agent_id, args["message"], wait=wait, model=model)
        except BadAgentId as exc:
            return refused_result("invalid_arguments", str(exc))
        except AgentBusy as exc:
            return refused_result("busy", f"{exc.message}; try again later")
        except CannotResume as exc:
            return refused_result("cannot_resume", exc.message)
        except AgentError as exc:
            return refused_result("unknown_agent", exc.message)
        except ValueError as exc:
            return refused_result("invalid_arguments", str(exc))
        if not result.run_id:  # nothing ran: the session's total budget is spent
            return refused_result("budget_spent", result.message)
        return ToolCallResult(content=json.dumps(answer(agent_id.strip(), result)))

    return ParentTool(SEND_MESSAGE_SPEC, call)


def list_agents_tool(agents: Agents, *, parent_run: str | None = None) -> ParentTool:
    async def call(params: ToolCallParams) -> ToolCallResult:
        args = params.arguments
        problem = check_arguments(args, required={}, optional={"status": str})
        status = args.get("status")
        if problem is None and status is not None and status not in AGENT_STATUSES:
            problem = f"status: one of {', '.join(AGENT_STATUSES)}"
        if problem is not None:
            return refused_result("invalid_arguments", f"Invalid arguments: {problem}.")
        found = await agents.list(status=status, parent_run=parent_run, limit=LISTED_MAX)
        listed = [listing(a) for a in found if a.status != "closed"]
        return ToolCallResult(content=json.dumps({"agents": listed, "count": len(listed)}))

    return ParentTool(LIST_AGENTS_SPEC, call)


# --- what the model reads -----------------------------------------------------------------------


def answer(agent_id: str, result: RunResult) -> dict[str, Any]:
    """A message's outcome for the model: the task tool's statuses, plus `needs_input`."""
    from tether.parent.run.status import task_status

    status = "needs_input" if result.status == "needs_input" else task_status(result)
    out: dict[str, Any] = {"agentId": agent_id, "status": status, "summary": result.summary}
    if result.question:
        out["question"] = result.question
    if status not in ("completed", "needs_input") and result.message:
        out["message"] = result.message
    if result.failure is not None and status not in ("completed", "needs_input"):
        out["failure"] = result.failure.kind
    if result.artifacts:
        out["artifacts"] = [
            {"path": a.path, "size": a.size, "fsType": a.fs_type} for a in result.artifacts
        ]
    out["usage"] = msgspec.to_builtins(result.usage)
    return out


def listing(agent: AgentSummary) -> dict[str, Any]:
    summary = agent.last_summary
    if len(summary) > LISTED_SUMMARY_CHARS:
        summary = summary[:LISTED_SUMMARY_CHARS] + " [cut; send_message for more]"
    out: dict[str, Any] = {
        "agentId": agent.id,
        "type": agent.agent_type,
        "label": agent.label,
        "status": agent.status,
        "lastSummary": summary,
        "usage": msgspec.to_builtins(agent.usage),
    }
    if agent.status == "needs_input" and agent.question:
        out["question"] = agent.question
    return out


def refused_result(error: str, message: str) -> ToolCallResult:
    body = {"status": "error", "error": error, "message": message}
    return ToolCallResult(content=json.dumps(body), is_error=True)


def check_arguments(
    args: object, *, required: dict[str, type], optional: dict[str, type] | None = None
) -> str | None:
    """The first problem with a tool's arguments, named by argument, or `None`."""
    if not isinstance(args, dict):
        return "the arguments must be a JSON object"
    known = {**required, **(optional or {})}
    for name in args:
        if name not in known:
            return f"{str(name)[:40]!r} is not an argument; the arguments are {', '.join(known)}"
    for name in required:
        if name not in args:
            return f"{name}: missing (required)"
    for name, kind in known.items():
        if name in args and not isinstance(args[name], kind):
            return f"{name}: expected a string"
    return None
