"""What an orchestrator's model gets to work with continuable sub-agents: `send_message` and
`list_agents` as tools the parent serves (`ParentTool`), and a delegation runner that starts
each task's sub-agent as a continuable agent, so the task tool's `subagentId` is an id those
tools take.

The tools follow the task tool's discipline: whatever goes wrong — arguments that are not what
the schema says, a garbled or unknown id, an agent busy in another process, one that cannot be
resumed here, a spent budget — comes back as a result the model reads (`isError: true`, a JSON
object with `status: "error"`, an `error` code and a `message`), never as an exception. A
message that reached the agent comes back as its answer, whatever it was (`status` as the
task tool reports it, or `needs_input` with the `question` the agent asks).

    tools = agent_tools(sup.agents, parent_run="orchestration-1")
    handle = await sup.start(prompt, parent_tools=[task_tool, *tools], ...)

With `parent_run`, the tools see and reach only the agents started for that orchestration
(`continuable_runner(..., parent_run=...)` or `spawn_agent(parent_run=...)`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from tether.parent.agents.service import (
    DEFAULT_KEEP_ALIVE,
    AgentBusy,
    AgentError,
    Agents,
    CannotResume,
)
from tether.parent.agents.sessions import AGENT_STATUSES, AgentSummary, BadAgentId
from tether.parent.models import ModelProvider
from tether.parent.process.config import ChildConfig
from tether.parent.process.limits import Limits
from tether.parent.run.broker import ParentTool
from tether.parent.run.events import ChildEvent, Event
from tether.protocol.messages import Failure, RunResult, ToolCallParams, ToolCallResult, ToolSpec

if TYPE_CHECKING:
    from tether.parent.delegation.delegator import Runner, RunRequest

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
        problem = _check_arguments(args, required={"agent_id": str, "message": str})
        if problem is None and not args["message"].strip():
            problem = "message: must not be empty or blank"
        if problem is not None:
            return refused("invalid_arguments", f"Invalid arguments: {problem}.")
        agent_id = args["agent_id"]
        try:
            if parent_run is not None:
                store = await agents.store()
                summary = await store.get(agent_id)
                if summary is None or summary.parent_run != parent_run:
                    return refused(
                        "unknown_agent",
                        f"No sub-agent {agent_id.strip()[:40]!r} among yours (list_agents shows "
                        "them).",
                    )
            result = await agents.send(agent_id, args["message"], wait=wait, model=model)
        except BadAgentId as exc:
            return refused("invalid_arguments", str(exc))
        except AgentBusy as exc:
            return refused("busy", f"{exc.message}; try again later")
        except CannotResume as exc:
            return refused("cannot_resume", exc.message)
        except AgentError as exc:
            return refused("unknown_agent", exc.message)
        except ValueError as exc:
            return refused("invalid_arguments", str(exc))
        if not result.run_id:  # nothing ran: the session's total budget is spent
            return refused("budget_spent", result.message)
        return ToolCallResult(content=json.dumps(answer(agent_id.strip(), result)))

    return ParentTool(SEND_MESSAGE_SPEC, call)


def list_agents_tool(agents: Agents, *, parent_run: str | None = None) -> ParentTool:
    async def call(params: ToolCallParams) -> ToolCallResult:
        args = params.arguments
        problem = _check_arguments(args, required={}, optional={"status": str})
        status = args.get("status")
        if problem is None and status is not None and status not in AGENT_STATUSES:
            problem = f"status: one of {', '.join(AGENT_STATUSES)}"
        if problem is not None:
            return refused("invalid_arguments", f"Invalid arguments: {problem}.")
        found = await agents.list(status=status, parent_run=parent_run, limit=LISTED_MAX)
        listed = [listing(a) for a in found if a.status != "closed"]
        return ToolCallResult(content=json.dumps({"agents": listed, "count": len(listed)}))

    return ParentTool(LIST_AGENTS_SPEC, call)


# --- what the model reads -----------------------------------------------------------------------


def answer(agent_id: str, result: RunResult) -> dict[str, Any]:
    """A message's outcome for the model: the task tool's statuses, plus `needs_input`."""
    from tether.parent.delegation.output import task_status

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


def refused(error: str, message: str) -> ToolCallResult:
    body = {"status": "error", "error": error, "message": message}
    return ToolCallResult(content=json.dumps(body), is_error=True)


def _check_arguments(
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


# --- the delegation runner ----------------------------------------------------------------------


def continuable_runner(
    agents: Agents,
    *,
    keep_alive: float | str = DEFAULT_KEEP_ALIVE,
    parent_run: str | None = None,
    model: str | ModelProvider | None = None,
    limits: Limits | None = None,
    config: ChildConfig | None = None,
    poll: float = 0.25,
) -> Runner:
    """A `delegation.Runner` that starts each sub-agent as a continuable agent (with its own
    session, under `parent_run`) and tells the delegator its id (`RunRequest.bind_agent`), so
    the task result's `subagentId` is the agent id `send_message` takes. Progress events are
    relayed, usage reported as the broker counts it, and the run cancelled once the tree's
    budget is spent. (`SupervisorRunner(..., keep_alive=...)` does the same per definition,
    with each definition's model and provider.)"""

    async def run(request: RunRequest) -> RunResult:
        return await run_continuable(
            agents,
            request,
            keep_alive=keep_alive,
            parent_run=parent_run,
            model=model,
            limits=limits,
            config=config,
            workspace=request.workspace or ".",
            poll=poll,
        )

    return run


async def run_continuable(
    agents: Agents,
    request: RunRequest,
    *,
    keep_alive: float | str,
    parent_run: str | None,
    model: str | ModelProvider | None,
    limits: Limits | None,
    config: ChildConfig | None,
    workspace: str,
    poll: float = 0.25,
) -> RunResult:
    """One task's sub-agent as a continuable agent (see `continuable_runner`)."""

    def relay(ev: Event) -> None:
        if isinstance(ev, ChildEvent):
            request.progress(ev.kind, dict(ev.data))

    try:
        handle = await agents.spawn(
            request.prompt,
            agent=request.agent,
            workspace=workspace,
            history=request.history,
            label=request.label,
            description=request.label,
            parent_run=parent_run,
            keep_alive=keep_alive,
            model=model,
            limits=limits,
            config=config,
            on_event=relay,
        )
    except ValueError as exc:
        return RunResult(
            success=False,
            status="error",
            message=f"the sub-agent could not start: {exc}",
            failure=Failure(kind="spawn_failed"),
        )
    bind = getattr(request, "bind_agent", None)
    if bind is not None:
        bind(handle.id)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_budget, handle.run, request, poll)
            result = await handle.result()
            tg.cancel_scope.cancel()
    except anyio.get_cancelled_exc_class():
        # Like every runner: the child is gone before the cancellation goes on.
        with anyio.CancelScope(shield=True):
            handle.run.abort()
            await handle.run.wait()
        raise
    request.report_usage(result.usage)
    return result


async def _watch_budget(run: Any, request: RunRequest, poll: float) -> None:
    while True:
        request.report_usage(run.broker.brokered.usage)
        if request.over_budget():
            await run.cancel("the token budget of the whole tree is spent")
            return
        await anyio.sleep(poll)
