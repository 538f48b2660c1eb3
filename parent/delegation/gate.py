"""The one gate every delegated run passes: first runs and follow-ups alike.

Theory of operation
-------------------
A delegation (an orchestrator's task calls, `tether mcp`) runs its sub-agents through one
`Gate`. Whatever makes a sub-agent work — a task call, a follow-up message to a continuable
sub-agent (`send_message`), the verifier of a change and each fix cycle — is a `Job`, and every
job passes the same stages, in this order:

1. the tree budget: a job is refused (the task tool's `budget_spent`, nothing runs) once the
   tree's token budget is spent; a run the budget ends while it works fails `budget_exhausted`.
   The budget is a `run.budget.Budget` that every run of the tree reserves its model turns
   against, so the parent's brokers hold it while the runs go on, and turns sent together
   cannot pass it; when a settle spends it, the runner ends its live sub-agents;
2. build serialization: a build-mode job waits for the workspace — build sub-agents change the
   shared workspace one at a time, so the parent's before/after diff belongs to one of them
   (read-only ones cannot change it and run side by side);
3. admission: a place under the concurrency cap, first in first out, its position told as
   `subagent.queued` events (the budget is looked at again once it has its place);
4. the run: the runner gets a `RunRequest` (`runner.py`) and returns a `RunResult`; a runner
   that raises is a runner fault, an `error` result; the runner tells what only it knows
   through `RunRequest.facts` (the continuable agent's id, the model it billed);
5. for a build-mode job that completed: the parent's diff of the workspace and, when the policy
   says so (`verification.py`), the verifier — always a one-shot run, never a session the
   orchestrator could message — and at most `max_fix_cycles` fixes, each a follow-up to the
   same continuable sub-agent when there is one (so its session holds the final state), else a
   fresh run of its definition. A build-mode job that did not complete but changed a file the
   user's own tools run (the diff's `sensitive`) gets one verifier run and no fix;
6. every run (task, follow-up, verifier, fix) gets its ledger record — the model billed, the
   agent id, the run id, the tool call id — before its result is handed back, and its
   `subagent.started` (with the prompt and the run id) and `subagent.completed` events.

The `TaskOutput` of a job names the sub-agent by its agent id when it is continuable (what
`send_message` takes), else by its delegation id (`sa-N`); its artifacts are checked again as
it is delivered (`run.evidence.recheck`); a check that raises (tether's own failure) makes the
output a `parent_error`, logged, rather than a raise. One event loop owns a gate; jobs run
concurrently by being awaited from concurrent tasks.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import msgspec

from tether.parent.delegation.admission import Slots, TreeBudget
from tether.parent.delegation.changesets import changed_files, decide
from tether.parent.delegation.ledger import Ledger, UsageRecord, now
from tether.parent.delegation.output import (
    AttemptReport,
    TaskOutput,
    Verdict,
    Verification,
    for_model,
)
from tether.parent.delegation.snapshot import Snapshot, WorkspaceDiff, diff, take_snapshot
from tether.parent.delegation.verification import VerifierPolicy, fix_prompt, verifier_prompt
from tether.parent.roles.definitions import SubagentDefinition
from tether.parent.roles.prompts import CONTINUABLE_SUBAGENT_SYSTEM_PROMPT
from tether.parent.run import apply as applying
from tether.parent.run.attempts import default_choice
from tether.parent.run.budget import Budget
from tether.parent.run.evidence import as_applied, parse_verdict, recheck
from tether.parent.run.results import parent_error
from tether.parent.run.spec import Chooser
from tether.parent.run.status import task_status
from tether.parent.run.stop import StopLine
from tether.parent.run.subagent_events import (
    Role,
    SubagentCompleted,
    SubagentEvent,
    SubagentProgress,
    SubagentQueued,
    SubagentStarted,
    SubagentStatus,
    WaitingFor,
)
from tether.protocol.messages import (
    AgentDefinition,
    ApplyOutcome,
    ApplyPolicy,
    Artifact,
    ChangeSet,
    ChatMessage,
    Failure,
    RunResult,
    Usage,
)

log = logging.getLogger("tether.delegation")

ProgressCallback = Callable[[str, dict[str, Any]], None]
"""`(kind, data)` of one child event (`agent/event` kinds: step, text, tool_call, ...)."""
EventCallback = Callable[[SubagentEvent], None]


@dataclass
class RunFacts:
    """What a runner tells the gate about the run it made (it alone knows them)."""

    agent_id: str | None = None
    """The continuable agent the sub-agent is (`send_message` takes this id)."""
    model: str | None = None
    """The model string its turns were billed to."""
    run_id: str = ""
    """The run that carried it (a warm follow-up: its agent's live run)."""
    metered: bool = False
    """Its turns were reserved against the tree's budget by the parent's broker."""
    continuable: bool = False
    """It can be continued (`send_message`); else why not is in `not_continuable`."""
    not_continuable: str = ""


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
    """For a runner the parent's brokers do not meter: cumulative usage so far."""
    over_budget: Callable[[], bool]
    """True once the tree's token budget is spent: a runner stops the sub-agent then."""
    run_id: str = ""
    """The id the run gets (a warm follow-up keeps its agent's)."""
    budget: Budget | None = None
    """The tree's budget, for the run's spec: its broker reserves every turn against it."""
    continuable: bool = False
    """Start the sub-agent as a continuable agent, if the runner keeps agents."""
    follow_up: str | None = None
    """Not a new sub-agent: a follow-up message (`prompt`) to this continuable agent."""
    facts: RunFacts = field(default_factory=RunFacts)
    workspace_mode: str = "shared"
    """`layered`: run it in a layer of its own (its result's change set is the gate's to
    apply: the run's own policy is `never`)."""
    layer: str | None = None
    """Run it in this kept layer (a layered job's verifier, read-only, or its fix)."""
    stops: StopLine | None = None
    """The line a stop of the call takes its runs down with (a tool call served over MCP);
    `None`: the runner's own (an orchestration's)."""

    def bind_agent(self, agent_id: str) -> None:
        """A runner that started the sub-agent as a continuable agent names its id here."""
        self.facts.agent_id = agent_id
        self.facts.continuable = True


class Runner(Protocol):
    """What runs one sub-agent: any `async (RunRequest) -> RunResult` callable."""

    async def __call__(self, request: RunRequest) -> RunResult: ...


@dataclass(frozen=True)
class Job:
    """One sub-agent's piece of work, as the gate runs it."""

    definition: SubagentDefinition
    read_only: bool
    prompt: str
    role: Role
    history: tuple[ChatMessage, ...] = ()
    follow_up: str | None = None
    """A follow-up message to this continuable agent (`prompt` is the message)."""
    attempts: int = 1
    """Run it this many times at once, each in a layer of its own; one is taken."""
    layer: str | None = None
    """Run it in this kept layer (a layered job's verifier or fix)."""
    layered: bool = False
    """Run it in a layer of its own."""


@dataclass
class Call:
    """One tool call (a task call, a `send_message`): the runs it made add up in its output."""

    label: str
    tool_call_id: str
    on_event: EventCallback | None = None
    stops: StopLine | None = None
    """Where its runs go, for a stop of the call (`RunRequest.stops`)."""
    steps: int = 0
    artifacts: dict[str, Artifact] = field(default_factory=dict)


@dataclass(frozen=True)
class Known:
    """A continuable sub-agent this delegation started: what its follow-ups run as."""

    agent_id: str
    definition: SubagentDefinition
    read_only: bool
    subagent_id: str


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


@dataclass
class _Ran:
    sid: str
    result: RunResult
    facts: RunFacts


class Gate:
    """See the module docstring."""

    def __init__(
        self,
        runner: Runner,
        *,
        workspace: str | None,
        policy: VerifierPolicy,
        ledger: Ledger,
        budget: TreeBudget,
        slots: Slots,
        writers: Slots,
        verifier: Callable[[], SubagentDefinition],
        on_event: EventCallback | None = None,
        snapshot_exclude: Iterable[str] = (),
        snapshot_max_entries: int = 0,
        continuable: bool = False,
        workspace_mode: str = "shared",
        apply: ApplyPolicy = "on_success",
        choose: Chooser | None = None,
    ) -> None:
        """`continuable`: the runner keeps task sub-agents as continuable agents (they are told
        they may ask, and follow-ups reach them). `workspace_mode`: how build sub-agents see
        the workspace unless their definition says (`layered`: each in a layer of its own, in
        parallel, its change set applied as `apply` says: `on_success`, `on_verified` or
        `never`); `choose`: picks the attempt taken of a task call with `attempts` (see
        `attempts.py`)."""
        self.runner = runner
        self.continuable = continuable
        self.workspace = workspace
        self.policy = policy
        self.ledger = ledger
        self.budget = budget
        self.slots = slots
        self.writers = writers
        self._verifier = verifier
        self._on_event = on_event
        self._exclude = frozenset(snapshot_exclude)
        self._max_entries = snapshot_max_entries
        self._live: dict[str, _Live] = {}
        self._ids = itertools.count(1)
        self._runs = itertools.count(1)
        self.known: dict[str, Known] = {}
        """The continuable sub-agents this delegation started, by agent id."""
        self.not_continuable: dict[str, str] = {}
        """Sub-agents of this delegation that cannot be continued, by id: why not."""
        self.workspace_mode = workspace_mode
        self.apply = apply
        self.choose = choose

    # --- queries ------------------------------------------------------------------------------

    def status(self) -> list[SubagentStatus]:
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

    def spent_message(self) -> str:
        return (
            f"The token budget of the whole tree ({self.budget.total}) is spent "
            f"({self.budget.spent} used); no further sub-agent can start."
        )

    # --- a job, end to end --------------------------------------------------------------------

    async def deliver(self, call: Call, job: Job) -> TaskOutput:
        """Run `job` through every stage and return what the model reads."""
        if job.read_only:
            ran = await self._run(call, job)
            return self._output(call, ran)
        if job.attempts > 1:
            return await self._attempts(call, job)
        if self.layered(job):
            return await self._layered(call, job)
        return await self._build(call, job)

    def layered(self, job: Job) -> bool:
        """Whether a build job works in a layer of its own (its definition's mode, else the
        delegation's)."""
        mode = job.definition.workspace_mode or self.workspace_mode
        return mode == "layered" and self.workspace is not None and job.follow_up is None

    async def _build(self, call: Call, job: Job) -> TaskOutput:
        sid = self._subagent_id(job)
        live = self._track(sid, job.definition.type, call, job.role)
        try:
            async with self.writers.admitted(self._on_queued(live, call, "workspace")):
                return await self._build_admitted(call, job, sid)
        except anyio.get_cancelled_exc_class():
            if sid in self._live:  # still waiting for the workspace
                self._abandon(live, job.definition, call)
            raise
        finally:
            self._live.pop(sid, None)

    async def _build_admitted(self, call: Call, job: Job, sid: str) -> TaskOutput:
        before = await self._snapshot()
        ran = await self._run(call, job, sid=sid)
        change = await self._changes(before)
        if change is None or not self.policy.needs_verification(change):
            return self._output(call, ran, change)
        if task_status(ran.result) != "completed":
            if not change.sensitive:
                return self._output(call, ran, change)
            # Unfinished, but what it left the user's tools will run: checked once, not fixed.
            verification, _ = await self._verify(call, job.prompt, ran, change, 0)
            return self._output(call, ran, change, verification)
        task = job.prompt
        fix_cycles = 0
        last = ran
        while True:
            verification, check = await self._verify(call, task, last, change, fix_cycles)
            if check is None or verification.verdict != "FAIL":
                break
            if fix_cycles >= self.policy.max_fix_cycles:
                break
            fix_cycles += 1
            fix = fix_prompt(task=task, findings=check.summary, change=change, cycle=fix_cycles)
            # The fix belongs to the task's sub-agent: its session, when it has one.
            agent_id = ran.facts.agent_id if ran.facts.continuable else None
            fixed = await self._run(
                call,
                Job(job.definition, False, fix, "fix", follow_up=agent_id),
                sid=sid if agent_id is not None else None,
            )
            last = _Ran(ran.sid, fixed.result, ran.facts)
            change = await self._changes(before) or change
            if task_status(fixed.result) != "completed":
                verification = msgspec.structs.replace(
                    verification,
                    fix_cycles=fix_cycles,
                    note=f"fix cycle {fix_cycles} did not finish ({task_status(fixed.result)}: "
                    f"{fixed.result.message}); the change was not verified again",
                )
                break
        return self._output(call, last, change, verification)

    # --- a layered build job ------------------------------------------------------------------

    async def _layered(self, call: Call, job: Job) -> TaskOutput:
        """A build job in a layer of its own: no wait for the workspace (its writes stay in
        its layer, so build jobs run side by side); its change set verified in the layer (a
        FAIL's fix runs in the same layer) and applied as the policy says."""
        got = await self._in_layer(call, job)
        return await self._settle(call, *got)

    async def _in_layer(
        self, call: Call, job: Job, *, sid: str | None = None
    ) -> tuple[_Ran, Verification | None]:
        """Run a build job in a new layer, then its verifier and fixes in that layer; nothing
        is applied here."""
        ran = await self._run(call, _replace_job(job, layered=True), sid=sid)
        cs = ran.result.changes
        if cs is None or not cs.changes:
            return ran, None
        change = changed_files(cs, ran.result.sensitive_changes)
        completed = task_status(ran.result) == "completed"
        wanted = self.policy.needs_verification(change) or (
            self.apply == "on_verified" and self.policy.enabled
        )
        if not wanted or (not completed and not change.sensitive):
            return ran, None
        if not completed:
            verification, _ = await self._verify(call, job.prompt, ran, change, 0, layer=cs.layer)
            return ran, verification
        last, fix_cycles = ran, 0
        while True:
            verification, check = await self._verify(
                call, job.prompt, last, change, fix_cycles, layer=cs.layer
            )
            if check is None or verification.verdict != "FAIL":
                break
            if fix_cycles >= self.policy.max_fix_cycles:
                break
            fix_cycles += 1
            fix = fix_prompt(
                task=job.prompt, findings=check.summary, change=change, cycle=fix_cycles
            )
            fixed = await self._run(call, Job(job.definition, False, fix, "fix", layer=cs.layer))
            last = _Ran(ran.sid, fixed.result, ran.facts)
            if fixed.result.changes is not None:
                cs = fixed.result.changes
                change = changed_files(cs, fixed.result.sensitive_changes)
            if task_status(fixed.result) != "completed":
                verification = msgspec.structs.replace(
                    verification,
                    fix_cycles=fix_cycles,
                    note=f"fix cycle {fix_cycles} did not finish ({task_status(fixed.result)}: "
                    f"{fixed.result.message}); the change was not verified again",
                )
                break
        return last, verification

    async def _settle(self, call: Call, ran: _Ran, verification: Verification | None) -> TaskOutput:
        """Apply (or keep, or discard) a layered job's change set as the policy says."""
        result = ran.result
        cs = result.changes
        if cs is not None:
            outcome = await self._decide(cs, ran, verification)
            result = msgspec.structs.replace(result, applied=outcome)
            if outcome.state == "applied":  # its artifacts are the workspace's files now
                result = as_applied(cs.workspace, result)
        return self._output(call, _Ran(ran.sid, result, ran.facts), None, verification)

    async def _decide(
        self, cs: ChangeSet, ran: _Ran, verification: Verification | None
    ) -> ApplyOutcome:
        if not cs.changes:
            await self._discard(cs)
            return ApplyOutcome(state="applied", policy=self.apply, message="nothing changed")
        completed = task_status(ran.result) == "completed"
        go, why = decide(self.apply, completed=completed, verification=verification)
        if not go:
            if self.apply != "never":
                await self._discard(cs)
                why += "; its layer was discarded"
            return ApplyOutcome(
                state="not_applied" if self.apply == "never" else "discarded",
                policy=self.apply,
                message=why,
            )
        applier = getattr(self.runner, "apply_changes", None)
        if applier is not None:
            outcome: ApplyOutcome = await applier(cs, self.apply)
        else:
            outcome = await anyio.to_thread.run_sync(lambda: applying.apply(cs, policy=self.apply))
        if outcome.state != "applied":
            # What it could not apply is in the output (the conflicts, both sides): the layer
            # goes, and the model decides what to do.
            await self._discard(cs)
        return outcome

    async def _discard(self, cs: ChangeSet) -> None:
        discarder = getattr(self.runner, "discard_changes", None)
        if discarder is not None:
            await discarder(cs)

    # --- attempts -------------------------------------------------------------------------------

    async def _attempts(self, call: Call, job: Job) -> TaskOutput:
        """`job.attempts` runs of one build job at once, each in its own layer with its own
        verifier; the one taken (`choose`, else the first to pass its verifier, else — no
        verifier — the first to finish) is applied as the policy says, the others discarded."""
        n = job.attempts
        got: list[tuple[_Ran, Verification | None] | None] = [None] * n
        finished: list[int] = []
        one = _replace_job(job, attempts=1)

        async def attempt(i: int) -> None:
            got[i] = await self._in_layer(call, one)
            finished.append(i)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(attempt, i)
        done = [g for g in got if g is not None]
        results = [ran.result for ran, _ in done]
        taken, why = self._take(done, results, finished)
        reports = [
            AttemptReport(
                attempt=i + 1,
                status=task_status(ran.result),
                summary=(ran.result.summary or ran.result.message)[:500],
                verdict=verification.verdict if verification is not None else None,
                changed_files=[
                    c.path for c in (ran.result.changes.changes if ran.result.changes else [])
                ],
                subagent_id=ran.sid,
            )
            for i, (ran, verification) in enumerate(done)
        ]
        for i, (ran, _) in enumerate(done):
            cs = ran.result.changes
            if i != taken and cs is not None:
                await self._discard(cs)
        if taken is None:
            ran, verification = done[0]
            failed = msgspec.structs.replace(
                ran.result,
                success=False,
                status="error",
                message=f"none of the {n} attempts was taken: {why}; nothing was applied",
                failure=ran.result.failure or Failure(kind="agent_error"),
                applied=ApplyOutcome(state="discarded", policy=self.apply, message=why),
            )
            output = self._output(call, _Ran(ran.sid, failed, ran.facts), None, verification)
        else:
            output = await self._settle(call, *done[taken])
        return msgspec.structs.replace(
            output, attempts=reports, taken=None if taken is None else taken + 1, taken_because=why
        )

    def _take(
        self,
        done: list[tuple[_Ran, Verification | None]],
        results: list[RunResult],
        finished: list[int],
    ) -> tuple[int | None, str]:
        if self.choose is not None:
            try:
                taken = self.choose(results)
            except Exception as exc:  # the caller's callback: told, not raised
                return None, f"choose() failed: {type(exc).__name__}: {exc}"
            if taken is None:
                return None, "choose() picked none"
            if not 0 <= taken < len(done):
                return None, f"choose() answered {taken}, not an attempt"
            return taken, f"choose() picked attempt {taken + 1}"
        verified = [i for i in finished if done[i][1] is not None]
        for i in finished:
            ran, verification = done[i]
            passed = verification is not None and verification.verdict == "PASS"
            if passed and task_status(ran.result) == "completed":
                return i, f"attempt {i + 1} was the first to pass its verifier"
        if verified:
            return None, "no attempt passed its verifier"
        return default_choice(results, finished)

    async def _verify(
        self,
        call: Call,
        task: str,
        last: _Ran,
        change: WorkspaceDiff,
        fix_cycles: int,
        *,
        layer: str | None = None,
    ) -> tuple[Verification, RunResult | None]:
        """One verifier run over `change`: its verification, and its result when it finished."""
        prompt = verifier_prompt(
            task=task, label=call.label, author_summary=last.result.summary, change=change
        )
        job = Job(self._verifier(), True, prompt, "verifier", layer=layer)
        check = (await self._run(call, job)).result
        if task_status(check) != "completed":
            return Verification(
                verdict="PARTIAL",
                fix_cycles=fix_cycles,
                findings=check.summary,
                note=f"the verifier did not finish ({task_status(check)}: {check.message})",
            ), None
        verdict: Verdict = parse_verdict(check.summary)
        return Verification(verdict=verdict, fix_cycles=fix_cycles, findings=check.summary), check

    # --- one sub-agent run --------------------------------------------------------------------

    async def _run(self, call: Call, job: Job, *, sid: str | None = None) -> _Ran:
        """Admit, run and record one sub-agent; its result, whatever happened."""
        sid = sid or self._subagent_id(job)
        definition, role = job.definition, job.role
        live = self._live.get(sid) or self._track(sid, definition.type, call, role)
        live.role = role
        facts = RunFacts()
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
                    return _Ran(sid, spent, facts)
                live.state, live.position, live.since = "running", None, time.monotonic()
                started_at = now()
                started = True
                request = self._request(call, job, live, facts)
                run_id = request.run_id
                if job.follow_up is not None:
                    live_run = getattr(self.runner, "live_run", None)
                    run_id = (live_run(job.follow_up) if live_run else None) or run_id
                self._emit(
                    SubagentStarted(
                        id=sid,
                        type=definition.type,
                        label=call.label,
                        tool_call_id=call.tool_call_id,
                        role=role,
                        read_only=job.read_only,
                        prompt=job.prompt,
                        run_id=run_id,
                        agent_id=job.follow_up or "",
                    ),
                    call,
                )
                try:
                    result = await self.runner(request)
                except anyio.get_cancelled_exc_class():
                    cut = _failed("cancelled", "the task call was cancelled", status="aborted")
                    self._finish(call, job, live, started_at, cut, facts)
                    raise
                except Exception as exc:
                    log.exception("the delegation runner failed")
                    result = _failed(
                        "agent_error", f"the runner failed: {type(exc).__name__}: {exc}"
                    )
                self._finish(call, job, live, started_at, result, facts)
                return _Ran(sid, result, facts)
        except anyio.get_cancelled_exc_class():
            if not started:
                self._abandon(live, definition, call)
            raise
        finally:
            self._live.pop(sid, None)

    def _request(self, call: Call, job: Job, live: _Live, facts: RunFacts) -> RunRequest:
        asks = self.continuable and (job.role == "task" or job.follow_up is not None)
        system = CONTINUABLE_SUBAGENT_SYSTEM_PROMPT if asks else None
        agent = job.definition.to_wire(read_only=job.read_only, system_prompt=system)
        cap = _min_opt(job.definition.token_budget, self.budget.remaining)
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
            if not facts.metered:
                self.budget.report(_budget_key(live, job), live.tokens)

        return RunRequest(
            definition=job.definition,
            agent=agent,
            prompt=job.prompt,
            read_only=job.read_only,
            history=job.history,
            label=call.label,
            tool_call_id=call.tool_call_id,
            subagent_id=live.id,
            role=job.role,
            workspace=self.workspace,
            progress=progress,
            report_usage=report_usage,
            over_budget=self.budget.exceeded,
            run_id=f"run-{os.getpid()}-{live.id}-{next(self._runs)}",
            budget=self.budget.pool,
            continuable=self.continuable and job.role == "task" and not job.layered,
            follow_up=job.follow_up,
            facts=facts,
            workspace_mode="layered" if job.layered or job.layer is not None else "shared",
            layer=job.layer,
            stops=call.stops,
        )

    def _finish(
        self,
        call: Call,
        job: Job,
        live: _Live,
        started_at: str,
        result: RunResult,
        facts: RunFacts,
    ) -> None:
        """Record the run (ledger first), then say it completed."""
        definition = job.definition
        status = task_status(result)
        used = result.usage.input_tokens + result.usage.output_tokens
        self.budget.settle(_budget_key(live, job), used, metered=facts.metered)
        call.steps += result.iteration_count
        agent_id = job.follow_up or facts.agent_id
        if job.role == "task":
            if facts.continuable and facts.agent_id is not None:
                self.known[facts.agent_id] = Known(
                    facts.agent_id, definition, job.read_only, live.id
                )
            elif facts.not_continuable:
                self.not_continuable[live.id] = facts.not_continuable
        self.ledger.append(
            UsageRecord(
                subagent_id=live.id,
                definition=definition.type,
                provider=definition.provider,
                model=facts.model or definition.model,
                role=live.role,
                tool_call_id=call.tool_call_id,
                label=call.label,
                run_id=result.run_id or facts.run_id,
                agent_id=agent_id,
                read_only=job.read_only,
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
                agent_id=agent_id or "",
            ),
            call,
        )

    def _abandon(self, live: _Live, definition: SubagentDefinition, call: Call) -> None:
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
        call: Call,
        ran: _Ran,
        change: WorkspaceDiff | None = None,
        verification: Verification | None = None,
    ) -> TaskOutput:
        result = ran.result
        try:
            result, change = self._as_delivered(result, change)
        except Exception as exc:  # owed all the same: tether's own failure, told
            log.exception("the delegation failed checking a result as it was delivered")
            rung = result.failure.rung if result.failure is not None else None
            result, change = parent_error(exc, result, rung=rung), None
        status = task_status(result)
        message = "" if status == "completed" else result.message
        if status == "completed" and verification is not None and verification.verdict == "FAIL":
            status = "failed_verification"
            where = (
                "nothing of it was applied"
                if result.workspace_mode == "layered"
                else "the change is in the workspace, unaccepted"
            )
            message = (
                f"the verifier still answered FAIL after {verification.fix_cycles} fix "
                f"cycle(s); {where}"
            )
        elif status == "conflict" and result.applied is not None:
            message = (
                f"{result.applied.message}: a sibling's change set reached the workspace first. "
                "Each conflict shows both sides; redo the task on the workspace as it is now, "
                "or leave it"
            )
        for a in result.artifacts:
            call.artifacts[a.path] = a
        for s in result.skipped:
            call.artifacts.pop(s.path, None)
        facts = ran.facts
        return TaskOutput(
            summary=result.summary or result.message,
            artifacts=list(call.artifacts.values()),
            status=status,
            steps=call.steps,
            skipped=list(result.skipped),
            message=message,
            failure=result.failure.kind if result.failure else None,
            changed_files=list(change.changed) if change is not None else [],
            # A build job's own diff spans its fixes; any other job has what its run saw.
            sensitive_changes=list(
                change.sensitive if change is not None else result.sensitive_changes
            ),
            verification=verification,
            subagent_id=facts.agent_id if facts.continuable and facts.agent_id else ran.sid,
            question=result.question if status == "needs_input" else None,
            workspace_mode=result.workspace_mode,
            changes=for_model(result.changes) if result.changes is not None else None,
            applied=result.applied,
        )

    def _as_delivered(
        self, result: RunResult, change: WorkspaceDiff | None
    ) -> tuple[RunResult, WorkspaceDiff | None]:
        """`result` checked as the files are now, and a layered run's changed files."""
        if self.workspace is not None:
            result = recheck(self.workspace, result)
        if result.workspace_mode == "layered" and change is None and result.changes is not None:
            change = changed_files(result.changes, result.sensitive_changes)
        return result, change

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

    def _subagent_id(self, job: Job) -> str:
        if job.follow_up is not None:
            known = self.known.get(job.follow_up)
            if known is not None:
                return known.subagent_id
        return f"sa-{next(self._ids)}"

    def _track(self, sid: str, type: str, call: Call, role: Role) -> _Live:
        live = _Live(sid, type, call.label, call.tool_call_id, role, time.monotonic())
        self._live[sid] = live
        return live

    def _on_queued(self, live: _Live, call: Call, waiting_for: WaitingFor) -> Callable[[int], None]:
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

    def _emit(self, event: SubagentEvent, call: Call) -> None:
        for cb in (self._on_event, call.on_event):
            if cb is None:
                continue
            try:
                cb(event)
            except Exception:  # a listener's bug must not break a delegation
                log.exception("a delegation event listener failed")


def _replace_job(job: Job, **changes: Any) -> Job:
    return dataclasses.replace(job, **changes)


def _budget_key(live: _Live, job: Job) -> str:
    return f"{live.id}/{job.role}/{id(job)}"


def _completed(
    sid: str,
    definition: SubagentDefinition,
    call: Call,
    role: Role,
    status: Any,
    message: str,
    *,
    success: bool = False,
    run_id: str = "",
    agent_id: str = "",
) -> SubagentCompleted:
    return SubagentCompleted(
        id=sid,
        type=definition.type,
        label=call.label,
        tool_call_id=call.tool_call_id,
        role=role,
        success=success,
        status=status,
        message=message,
        run_id=run_id,
        agent_id=agent_id,
    )


def _failed(kind: Any, message: str, *, status: Any = "error") -> RunResult:
    return RunResult(success=False, status=status, message=message, failure=Failure(kind=kind))


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
