"""The delegator: the model-facing calls of a delegation — a task call, a follow-up to a
continuable sub-agent — each carried through the one gate (`gate.py`) against an injected
runner.

Theory of operation. `Delegator.execute(arguments, tool_call_id=...)` is what an orchestrator's
`task` call becomes; `Delegator.follow_up(agent_id, message, tool_call_id=...)` is what its
`send_message` becomes (`message_tool()` is that tool, over this delegator). Neither raises for
anything the model or a sub-agent did (only its own cancellation propagates); every outcome is
a `TaskOutput`:

1. validate: a task call's arguments against the tool's schema (`tool.py`), a follow-up's
   agent id against the sub-agents this delegation started (`Gate.known`); problems come back
   as `status: "error"` naming what is wrong;
2. the tree budget: once it is spent nothing starts (`budget_spent`);
3. the gate: build serialization, admission, the run, the parent's diff and the verifier, the
   ledger record and the events — the same for a task and a follow-up (see `gate.py`).

State: the gate (live sub-agents, the two queues, the tree budget, the ledger, the known
continuable sub-agents). All of it belongs to the event loop that runs the calls; independent
calls run concurrently by being awaited from concurrent tasks (one per tool call of a model
turn).

The runner is a seam; `runner.SupervisorRunner` fills it with the supervisor (see there).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.parent.delegation.admission import Slots, TreeBudget
from tether.parent.delegation.gate import (
    Call,
    EventCallback,
    Gate,
    Job,
    ProgressCallback,
    RunFacts,
    Runner,
    RunRequest,
)
from tether.parent.delegation.history import fork_history, without_tools
from tether.parent.delegation.ledger import Ledger
from tether.parent.delegation.output import ArgumentProblem, TaskOutput, refused
from tether.parent.delegation.snapshot import DEFAULT_EXCLUDE, DEFAULT_MAX_ENTRIES
from tether.parent.delegation.tool import TaskTool, task_tool
from tether.parent.delegation.verification import VerifierPolicy
from tether.parent.roles.builtins import BUILTIN_ROLES
from tether.parent.roles.definitions import Registry, SubagentDefinition
from tether.parent.run.broker import ParentTool
from tether.parent.run.spec import Chooser
from tether.parent.run.stop import StopLine
from tether.parent.run.subagent_events import SubagentStatus
from tether.protocol.messages import (
    APPLY_POLICIES,
    WORKSPACE_MODES,
    ChatMessage,
    ToolCallParams,
    ToolCallResult,
)

DEFAULT_MAX_CONCURRENT = 4

__all__ = [
    "DEFAULT_MAX_CONCURRENT",
    "Delegator",
    "EventCallback",
    "ProgressCallback",
    "RunFacts",
    "RunRequest",
    "Runner",
]


class Delegator:
    def __init__(
        self,
        definitions: Registry | Iterable[SubagentDefinition],
        runner: Runner,
        *,
        workspace: str | os.PathLike[str] | None = None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        token_budget: int | None = None,
        verifier: VerifierPolicy | None = None,
        ledger: Ledger | None = None,
        on_event: EventCallback | None = None,
        serialize_writers: bool = True,
        snapshot_exclude: Iterable[str] = DEFAULT_EXCLUDE,
        snapshot_max_entries: int = DEFAULT_MAX_ENTRIES,
        agent_types: Mapping[str, str] | None = None,
        continuable: bool | None = None,
        workspace_mode: str = "shared",
        apply: str = "on_success",
        choose: Chooser | None = None,
    ) -> None:
        """`agent_types`: provider names the model may pick per call with the task tool's
        `agentType` (each with a line saying what it is); two or more offer the argument.
        `continuable`: the runner keeps each task's sub-agent as a continuable agent, which
        `follow_up` continues (default: what the runner says, `keeps_agents`).
        `workspace_mode`: how build sub-agents see the workspace unless their definition says
        (`shared`, one at a time; `layered`, each in a layer of its own, side by side, its
        change set applied as `apply` says: `on_success`, `on_verified` or `never`); `choose`:
        picks the attempt taken of a task call with `attempts` (default: the first to pass
        its verifier, else the first to finish). Raises `ValueError` for an unknown mode or
        policy."""
        if workspace_mode not in WORKSPACE_MODES:
            raise ValueError(
                f"workspace_mode {workspace_mode!r}: expected one of {', '.join(WORKSPACE_MODES)}"
            )
        if apply not in APPLY_POLICIES:
            raise ValueError(f"apply {apply!r}: expected one of {', '.join(APPLY_POLICIES)}")
        if continuable is None:
            continuable = bool(getattr(runner, "keeps_agents", False))
        self.definitions = (
            definitions if isinstance(definitions, Registry) else Registry(definitions)
        )
        self.tool: TaskTool | None = task_tool(self.definitions, agent_types=agent_types)
        self.runner = runner
        self.workspace = None if workspace is None else str(Path(workspace).resolve())
        self.policy = verifier or VerifierPolicy()
        self.ledger = ledger if ledger is not None else Ledger()
        self.budget = TreeBudget(token_budget)
        self.slots = Slots(max_concurrent)
        self.writers = Slots(1 if serialize_writers else 1 << 30)
        self.gate = Gate(
            runner,
            workspace=self.workspace,
            policy=self.policy,
            ledger=self.ledger,
            budget=self.budget,
            slots=self.slots,
            writers=self.writers,
            verifier=self._verifier_definition,
            on_event=on_event,
            snapshot_exclude=snapshot_exclude,
            snapshot_max_entries=snapshot_max_entries,
            continuable=continuable,
            workspace_mode=workspace_mode,
            apply=apply,  # type: ignore[arg-type]
            choose=choose,
        )

    # --- queries ------------------------------------------------------------------------------

    def status(self) -> list[SubagentStatus]:
        """Every queued or running sub-agent, oldest first."""
        return self.gate.status()

    def limits(self) -> dict[str, Any]:
        """The admission limits and where they stand."""
        return {
            "maxConcurrent": self.slots.limit,
            "running": self.slots.holders,
            "queued": self.slots.waiting + self.writers.waiting,
            "tokenBudget": self.budget.total,
            "tokensSpent": self.budget.spent,
        }

    # --- the task call ------------------------------------------------------------------------

    async def execute(
        self,
        arguments: object,
        *,
        tool_call_id: str,
        history: Sequence[ChatMessage] = (),
        on_event: EventCallback | None = None,
        stops: StopLine | None = None,
    ) -> TaskOutput:
        """Carry out one task call. `history` is the orchestrator's transcript (used only with
        `forkContext: true`); `stops`: the line its runs are added to, so a stop of the call
        takes them down (`tether.parent.run.stop`; default: the runner's). Never raises for the
        model's or a sub-agent's doing."""
        if self.tool is None:
            return refused("invalid_arguments", "No sub-agent types are defined.")
        got = self.tool.validate(arguments)
        if isinstance(got, TaskOutput):
            return got
        if self.budget.exceeded():
            return refused("budget_spent", self.gate.spent_message())
        definition = self.definitions[got.subagent_type]
        if got.agent_type is not None:
            # The model's per-call choice of provider (validated against the offered names).
            definition = definition.replace(provider=got.agent_type)
        read_only = definition.read_only if got.read_only is None else got.read_only
        fork: tuple[ChatMessage, ...] = ()
        if got.fork_context or definition.provider == "fork":
            # The sub-agent has no task tool: earlier task exchanges reach it as text.
            fork = tuple(without_tools(fork_history(history, tool_call_id), {self.tool.name}))
        if got.attempts > 1 and read_only:
            return refused(
                "invalid_arguments",
                "Invalid arguments: attempts: several attempts are for a task that changes "
                "files (build mode); a read-only task needs one.",
                [ArgumentProblem(argument="attempts", problem="only for a build-mode task")],
            )
        if got.attempts > 1 and self.workspace is None:
            return refused(
                "invalid_arguments",
                "Invalid arguments: attempts: this delegation has no workspace to layer.",
                [ArgumentProblem(argument="attempts", problem="needs a workspace")],
            )
        call = Call(got.description, tool_call_id, on_event, stops)
        job = Job(definition, read_only, got.prompt, "task", fork, attempts=got.attempts)
        return await self.gate.deliver(call, job)

    # --- a follow-up --------------------------------------------------------------------------

    async def follow_up(
        self,
        agent_id: str,
        message: str,
        *,
        tool_call_id: str,
        on_event: EventCallback | None = None,
    ) -> TaskOutput:
        """Continue a continuable sub-agent this delegation started with `message`, through
        the same gate as its task: the tree budget (refused once spent, before it runs),
        admission, build serialization, the diff and the verifier, the ledger and the events.
        Never raises for the model's or a sub-agent's doing."""
        key = agent_id.strip() if isinstance(agent_id, str) else ""
        known = self.gate.known.get(key)
        if known is None:
            why = self.gate.not_continuable.get(key)
            if why is not None:
                return refused(
                    "cannot_continue",
                    f"Sub-agent {key} cannot be continued: {why}. Start a new task call instead.",
                )
            return refused(
                "unknown_agent",
                f"No sub-agent {key[:40]!r} among the ones you started (list_agents shows them).",
            )
        if not isinstance(message, str) or not message.strip():
            return refused("invalid_arguments", "Invalid arguments: message: must not be empty.")
        if self.budget.exceeded():
            return refused("budget_spent", self.gate.spent_message())
        call = Call(f"follow-up to {known.definition.type} {key}", tool_call_id, on_event)
        job = Job(known.definition, known.read_only, message, "follow_up", follow_up=key)
        return await self.gate.deliver(call, job)

    def message_tool(self, spec: Any) -> ParentTool:
        """`send_message` over this delegator: each call a `follow_up` through the gate; the
        model reads the follow-up's `TaskOutput` (and `agentId`). `spec`: the tool's
        `ToolSpec` (`agents.tools.SEND_MESSAGE_SPEC`)."""
        from tether.parent.agents.tools import check_arguments, refused_result

        calls = 0

        async def call(params: ToolCallParams) -> ToolCallResult:
            nonlocal calls
            calls += 1
            args = params.arguments
            problem = check_arguments(args, required={"agent_id": str, "message": str})
            if problem is not None:
                return refused_result("invalid_arguments", f"Invalid arguments: {problem}.")
            output = await self.follow_up(
                args["agent_id"],
                args["message"],
                tool_call_id=params.call_id or f"message-{calls}",
            )
            return output.tool_result({"agentId": args["agent_id"].strip()})

        return ParentTool(spec, call)

    def _verifier_definition(self) -> SubagentDefinition:
        if self.policy.verifier is not None:
            return self.policy.verifier
        mine = self.definitions.get("verifier")
        if mine is not None:
            return mine
        return next(d for d in BUILTIN_ROLES if d.type == "verifier")
