"""The delegator: one task call, end to end, against an injected runner.

Theory of operation. `Delegator.execute(arguments, tool_call_id=...)` is what an orchestrator's
tool call becomes. It never raises for anything the model or a sub-agent did (only its own
cancellation propagates); every outcome is a `TaskOutput`:

1. validate: the arguments against the tool's schema (`tool.py`); problems come back as
   `status: "error"` naming each argument;
2. admission: a spawn when the tree's token budget is spent is refused; otherwise it waits,
   first in first out, for a place under the concurrency cap (`Gate`), its position reported
   as `subagent.queued` events. A build-mode sub-agent first waits for the workspace: build
   sub-agents change the shared workspace one at a time, so the parent's before/after diff
   belongs to one of them (read-only sub-agents cannot change it and run side by side);
3. run: the runner gets a `RunRequest` and returns a `RunResult`; a runner that raises is a
   runner fault, turned into an `error` result;
4. for a build-mode run that completed: diff the workspace and, when the policy says so, run
   the verifier cycle (`verification.py`);
5. every run (task, verifier, fix) gets its usage record in the ledger *before* the result is
   handed back, and its `subagent.started` / `subagent.completed` events;
6. the `TaskOutput`.

State: the live sub-agents (`_live`, for `status()`), the two gates, the tree budget and the
ledger. All of it belongs to the event loop that runs `execute`; independent task calls run
concurrently by calling `execute` from concurrent tasks (one per tool call of a model turn).

The runner is a seam; `runner.SupervisorRunner` fills it with the supervisor: it spawns a
child with `request.agent` (the wire definition: mode, system prompt and token cap applied),
the prompt and the fork history in the workspace, relays the child's events through
`request.progress`, reports the broker-counted usage through `request.report_usage`, stops the
child when `request.over_budget()` turns true, and returns the child's `RunResult` with the
broker's usage.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec

from tether.parent.delegation.admission import Gate, TreeBudget
from tether.parent.delegation.builtins import BUILTIN_ROLES
from tether.parent.delegation.definitions import Registry, SubagentDefinition
from tether.parent.delegation.events import (
    Role,
    SubagentCompleted,
    SubagentEvent,
    SubagentProgress,
    SubagentQueued,
    SubagentStarted,
    SubagentStatus,
    WaitingFor,
)
from tether.parent.delegation.history import fork_history, without_tools
from tether.parent.delegation.ledger import Ledger, UsageRecord, now
from tether.parent.delegation.output import (
    TaskOutput,
    Verdict,
    Verification,
    refused,
    task_status,
)
from tether.parent.delegation.snapshot import (
    DEFAULT_EXCLUDE,
    DEFAULT_MAX_ENTRIES,
    Snapshot,
    WorkspaceDiff,
    diff,
    take_snapshot,
)
from tether.parent.delegation.tool import TaskRequest, TaskTool, task_tool
from tether.parent.delegation.verification import VerifierPolicy, fix_prompt, verifier_prompt
from tether.parent.run.evidence import parse_verdict
from tether.protocol.messages import (
    AgentDefinition,
    Artifact,
    ChatMessage,
    Failure,
    RunResult,
    Usage,
)

log = logging.getLogger("tether.delegation")

DEFAULT_MAX_CONCURRENT = 4
ProgressCallback = Callable[[str, dict[str, Any]], None]
"""`(kind, data)` of one child event (`agent/event` kinds: step, text, tool_call, ...)."""
EventCallback = Callable[[SubagentEvent], None]


@dataclass(frozen=True)
class RunRequest:
    """Everything a runner needs to run one sub-agent."""

    definition: SubagentDefinition
    agent: AgentDefinition
    """The wire definition to run: the mode, the system prompt and the token cap applied."""
    prompt: str
    read_only: bool
    history: tuple[ChatMessage, ...]
    """The fork history (`forkContext: true`), else empty."""
    label: str
    tool_call_id: str
    subagent_id: str
    role: Role
    workspace: str | None
    progress: ProgressCallback
    report_usage: Callable[[Usage], None]
    """Cumulative usage so far, as the parent's broker counted it."""
    over_budget: Callable[[], bool]
    """True once the tree's token budget is spent: the runner stops the sub-agent then."""
    bind_agent: Callable[[str], None] = lambda agent_id: None
    """A runner that starts the sub-agent as a continuable agent names its id here; the task
    result's `subagentId` is then that id (what `send_message` takes)."""


class Runner(Protocol):
    async def __call__(self, request: RunRequest) -> RunResult: ...


@dataclass
class _Live:
    id: str
    type: str
    label: str
    tool_call_id: str
    role: Role
    since: float
    state: str = "queued"
    position: int | None = None
    step: int = 0
    last_tool: str | None = None
    tokens: int = 0
    agent_id: str | None = None


@dataclass
class _Call:
    request: TaskRequest
    tool_call_id: str
    on_event: EventCallback | None
    steps: int = 0
    artifacts: dict[str, Artifact] = field(default_factory=dict)


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
    ) -> None:
        """`agent_types`: provider names the model may pick per call with the task tool's
        `agentType` (each with a line saying what it is); two or more offer the argument."""
        self.definitions = (
            definitions if isinstance(definitions, Registry) else Registry(definitions)
        )
        self.tool: TaskTool | None = task_tool(self.definitions, agent_types=agent_types)
        self.runner = runner
        self.workspace = None if workspace is None else str(Path(workspace).resolve())
        self.policy = verifier or VerifierPolicy()
        self.ledger = ledger if ledger is not None else Ledger()
        self.budget = TreeBudget(token_budget)
        self.slots = Gate(max_concurrent)
        self.writers = Gate(1 if serialize_writers else 1 << 30)
        self._on_event = on_event
        self._exclude = frozenset(snapshot_exclude)
        self._max_entries = snapshot_max_entries
        self._live: dict[str, _Live] = {}
        self._ids = itertools.count(1)

    # --- queries ------------------------------------------------------------------------------

    def status(self) -> list[SubagentStatus]:
        """Every queued or running sub-agent, oldest first."""
        t = time.monotonic()
        return [
            SubagentStatus(
                id=s.id,
                type=s.type,
                label=s.label,
                tool_call_id=s.tool_call_id,
                role=s.role,
                state="running" if s.state == "running" else "queued",
                position=s.position,
                elapsed=t - s.since,
                step=s.step,
                last_tool=s.last_tool,
                tokens=s.tokens,
            )
            for s in self._live.values()
        ]

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
    ) -> TaskOutput:
        """Carry out one task call. `history` is the orchestrator's transcript (used only with
        `forkContext: true`). Never raises for the model's or a sub-agent's doing."""
        if self.tool is None:
            return refused("invalid_arguments", "No sub-agent types are defined.")
        got = self.tool.validate(arguments)
        if isinstance(got, TaskOutput):
            return got
        if self.budget.exceeded():
            return refused(
                "budget_spent",
                f"The token budget of the whole tree ({self.budget.total}) is spent "
                f"({self.budget.spent} used); no further sub-agent can start.",
            )
        definition = self.definitions[got.subagent_type]
        if got.agent_type is not None:
            # The model's per-call choice of provider (validated against the offered names).
            definition = definition.replace(provider=got.agent_type)
        read_only = definition.read_only if got.read_only is None else got.read_only
        fork: tuple[ChatMessage, ...] = ()
        if got.fork_context or definition.provider == "fork":
            # The sub-agent has no task tool: earlier task exchanges reach it as text.
            fork = tuple(without_tools(fork_history(history, tool_call_id), {self.tool.name}))
        call = _Call(got, tool_call_id, on_event)
        if read_only:
            sid, result = await self._run(call, definition, True, got.prompt, fork, "task")
            return self._output(call, sid, result)
        return await self._build(call, definition, fork)

    async def _build(
        self, call: _Call, definition: SubagentDefinition, fork: tuple[ChatMessage, ...]
    ) -> TaskOutput:
        sid = self._new_id()
        live = self._track(sid, definition.type, call, "task")
        try:
            async with self.writers.admitted(self._on_queued(live, call, "workspace")):
                return await self._build_admitted(call, definition, fork, sid)
        except anyio.get_cancelled_exc_class():
            if sid in self._live:  # still waiting for the workspace
                self._abandon(live, definition, call)
            raise
        finally:
            self._live.pop(sid, None)

    async def _build_admitted(
        self,
        call: _Call,
        definition: SubagentDefinition,
        fork: tuple[ChatMessage, ...],
        sid: str,
    ) -> TaskOutput:
        task = call.request.prompt
        before = await self._snapshot()
        sid, result = await self._run(call, definition, False, task, fork, "task", sid=sid)
        change = await self._changes(before)
        if task_status(result) != "completed" or change is None:
            return self._output(call, sid, result, change)
        if not self.policy.needs_verification(change):
            return self._output(call, sid, result, change)

        verifier = self._verifier_definition()
        fix_cycles = 0
        last = result
        while True:
            _, check = await self._run(
                call,
                verifier,
                True,
                verifier_prompt(
                    task=task,
                    label=call.request.description,
                    author_summary=last.summary,
                    change=change,
                ),
                (),
                "verifier",
            )
            if task_status(check) != "completed":
                verification = Verification(
                    verdict="PARTIAL",
                    fix_cycles=fix_cycles,
                    findings=check.summary,
                    note=f"the verifier did not finish ({task_status(check)}: {check.message})",
                )
                break
            verdict: Verdict = parse_verdict(check.summary)
            verification = Verification(
                verdict=verdict, fix_cycles=fix_cycles, findings=check.summary
            )
            if verdict != "FAIL" or fix_cycles >= self.policy.max_fix_cycles:
                break
            fix_cycles += 1
            _, last = await self._run(
                call,
                definition,
                False,
                fix_prompt(task=task, findings=check.summary, change=change, cycle=fix_cycles),
                (),
                "fix",
            )
            change = await self._changes(before) or change
            if task_status(last) != "completed":
                verification = msgspec.structs.replace(
                    verification,
                    fix_cycles=fix_cycles,
                    note=f"fix cycle {fix_cycles} did not finish ({task_status(last)}: "
                    f"{last.message}); the change was not verified again",
                )
                break
        return self._output(call, sid, last, change, verification)

    def _verifier_definition(self) -> SubagentDefinition:
        if self.policy.verifier is not None:
            return self.policy.verifier
        mine = self.definitions.get("verifier")
        if mine is not None:
            return mine
        return next(d for d in BUILTIN_ROLES if d.type == "verifier")

    # --- one sub-agent run --------------------------------------------------------------------

    async def _run(
        self,
        call: _Call,
        definition: SubagentDefinition,
        read_only: bool,
        prompt: str,
        history: tuple[ChatMessage, ...],
        role: Role,
        *,
        sid: str | None = None,
    ) -> tuple[str, RunResult]:
        """Admit, run and record one sub-agent; its result, whatever happened."""
        sid = sid or self._new_id()
        live = self._live.get(sid) or self._track(sid, definition.type, call, role)
        live.role = role
        started = False
        try:
            async with self.slots.admitted(self._on_queued(live, call, "slot")):
                if self.budget.exceeded():
                    # Spent by siblings while this one waited: it never runs, so it has no
                    # ledger record, but what `subagent.queued` opened is closed.
                    spent = _failed(
                        "budget_exhausted",
                        "the token budget of the whole tree was spent before this sub-agent "
                        "could start",
                    )
                    if live.position is not None:
                        self._emit(
                            _completed(sid, definition, call, role, "truncated", spent.message),
                            call,
                        )
                    return sid, spent
                live.state, live.position, live.since = "running", None, time.monotonic()
                started_at = now()
                started = True
                self._emit(
                    SubagentStarted(
                        id=sid,
                        type=definition.type,
                        label=call.request.description,
                        tool_call_id=call.tool_call_id,
                        role=role,
                        read_only=read_only,
                    ),
                    call,
                )
                request = self._request(call, definition, read_only, prompt, history, role, live)
                try:
                    result = await self.runner(request)
                except anyio.get_cancelled_exc_class():
                    self._finish(
                        call,
                        definition,
                        live,
                        read_only,
                        started_at,
                        _failed("cancelled", "the task call was cancelled", status="aborted"),
                    )
                    raise
                except Exception as exc:
                    log.exception("the delegation runner failed")
                    result = _failed(
                        "agent_error", f"the runner failed: {type(exc).__name__}: {exc}"
                    )
                self._finish(call, definition, live, read_only, started_at, result)
                return live.agent_id or sid, result
        except anyio.get_cancelled_exc_class():
            if not started:
                self._abandon(live, definition, call)
            raise
        finally:
            self._live.pop(sid, None)

    def _request(
        self,
        call: _Call,
        definition: SubagentDefinition,
        read_only: bool,
        prompt: str,
        history: tuple[ChatMessage, ...],
        role: Role,
        live: _Live,
    ) -> RunRequest:
        agent = definition.to_wire(read_only=read_only)
        cap = _min_opt(definition.token_budget, self.budget.remaining)
        if cap != agent.token_budget:
            agent = msgspec.structs.replace(agent, token_budget=cap)

        def progress(kind: str, data: dict[str, Any]) -> None:
            if kind == "step":
                live.step = int(data.get("iteration", data.get("step", live.step + 1)))
            elif kind == "tool_call":
                live.last_tool = str(data.get("name", "?"))
            self._emit(
                SubagentProgress(
                    id=live.id,
                    type=live.type,
                    label=live.label,
                    kind=kind,
                    data=dict(data),
                    step=live.step,
                    last_tool=live.last_tool,
                    elapsed=time.monotonic() - live.since,
                    tokens=live.tokens,
                ),
                call,
            )

        def report_usage(usage: Usage) -> None:
            live.tokens = usage.input_tokens + usage.output_tokens
            self.budget.report(live.id, live.tokens)

        return RunRequest(
            definition=definition,
            agent=agent,
            prompt=prompt,
            read_only=read_only,
            history=history,
            label=call.request.description,
            tool_call_id=call.tool_call_id,
            subagent_id=live.id,
            role=role,
            workspace=self.workspace,
            progress=progress,
            report_usage=report_usage,
            over_budget=self.budget.exceeded,
            bind_agent=lambda agent_id: setattr(live, "agent_id", agent_id),
        )

    def _finish(
        self,
        call: _Call,
        definition: SubagentDefinition,
        live: _Live,
        read_only: bool,
        started_at: str,
        result: RunResult,
    ) -> None:
        """Record the run (ledger first), then say it completed."""
        status = task_status(result)
        used = result.usage.input_tokens + result.usage.output_tokens
        self.budget.settle(live.id, used)
        call.steps += result.iteration_count
        self.ledger.append(
            UsageRecord(
                subagent_id=live.id,
                definition=definition.type,
                provider=definition.provider,
                model=definition.model,
                role=live.role,
                tool_call_id=call.tool_call_id,
                label=call.request.description,
                run_id=result.run_id,
                read_only=read_only,
                steps=result.iteration_count,
                usage=result.usage,
                status=status,
                failure=result.failure.kind if result.failure else None,
                started_at=started_at,
                completed_at=now(),
            )
        )
        self._emit(
            _completed(
                live.id,
                definition,
                call,
                live.role,
                status,
                # A finished run's summary says more than "the agent called complete"; any
                # other end is told by why it ended.
                (result.summary or result.message)
                if status == "completed"
                else (result.message or result.summary),
                success=status == "completed",
                run_id=result.run_id,
            ),
            call,
        )

    def _abandon(self, live: _Live, definition: SubagentDefinition, call: _Call) -> None:
        """Cancelled before it started: close what a `subagent.queued` event opened."""
        if live.position is not None:
            self._emit(
                _completed(
                    live.id, definition, call, live.role, "aborted", "cancelled while queued"
                ),
                call,
            )

    # --- helpers ------------------------------------------------------------------------------

    def _output(
        self,
        call: _Call,
        sid: str,
        result: RunResult,
        change: WorkspaceDiff | None = None,
        verification: Verification | None = None,
    ) -> TaskOutput:
        status = task_status(result)
        message = "" if status == "completed" else result.message
        if status == "completed" and verification is not None and verification.verdict == "FAIL":
            status = "failed_verification"
            message = (
                f"the verifier still answered FAIL after {verification.fix_cycles} fix "
                "cycle(s); the change is in the workspace, unaccepted"
            )
        for a in result.artifacts:
            call.artifacts[a.path] = a
        return TaskOutput(
            summary=result.summary or result.message,
            artifacts=list(call.artifacts.values()),
            status=status,
            steps=call.steps,
            skipped=list(result.skipped),
            message=message,
            failure=result.failure.kind if result.failure else None,
            changed_files=list(change.changed) if change is not None else [],
            verification=verification,
            subagent_id=sid,
            question=result.question if status == "needs_input" else None,
        )

    async def _snapshot(self) -> Snapshot | None:
        if self.workspace is None:
            return None
        ws, exclude, cap = self.workspace, self._exclude, self._max_entries
        return await anyio.to_thread.run_sync(
            lambda: take_snapshot(ws, exclude=exclude, max_entries=cap)
        )

    async def _changes(self, before: Snapshot | None) -> WorkspaceDiff | None:
        after = await self._snapshot()
        if before is None or after is None:
            return None
        return diff(before, after)

    def _new_id(self) -> str:
        return f"sa-{next(self._ids)}"

    def _track(self, sid: str, type: str, call: _Call, role: Role) -> _Live:
        live = _Live(sid, type, call.request.description, call.tool_call_id, role, time.monotonic())
        self._live[sid] = live
        return live

    def _on_queued(
        self, live: _Live, call: _Call, waiting_for: WaitingFor
    ) -> Callable[[int], None]:
        gate = self.slots if waiting_for == "slot" else self.writers

        def tell(position: int) -> None:
            live.state, live.position = "queued", position
            self._emit(
                SubagentQueued(
                    id=live.id,
                    type=live.type,
                    label=live.label,
                    tool_call_id=call.tool_call_id,
                    position=position,
                    waiting_for=waiting_for,
                    limit=gate.limit,
                ),
                call,
            )

        return tell

    def _emit(self, event: SubagentEvent, call: _Call) -> None:
        for cb in (self._on_event, call.on_event):
            if cb is None:
                continue
            try:
                cb(event)
            except Exception:  # a listener's bug must not break a delegation
                log.exception("a delegation event listener failed")


def _completed(
    sid: str,
    definition: SubagentDefinition,
    call: _Call,
    role: Role,
    status: Any,
    message: str,
    *,
    success: bool = False,
    run_id: str = "",
) -> SubagentCompleted:
    return SubagentCompleted(
        id=sid,
        type=definition.type,
        label=call.request.description,
        tool_call_id=call.tool_call_id,
        role=role,
        success=success,
        status=status,
        message=message,
        run_id=run_id,
    )


def _failed(kind: Any, message: str, *, status: Any = "error") -> RunResult:
    return RunResult(success=False, status=status, message=message, failure=Failure(kind=kind))


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
