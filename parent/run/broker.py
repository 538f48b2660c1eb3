"""What a child may ask of the parent during a run, answered with what the parent decided.

Theory of operation
-------------------
Before a child is spawned, the parent resolves every model the run may use (`RunModels`): the
run's model — the caller's `model=` wins over the definition's `model` — and the definition's
`compactionModel`. A `model/complete` request then *selects* among those and nothing else
(`RunModels.select`): no model string that arrives over the wire is ever resolved, opened or
connected to, so a hostile child cannot point the parent's keys at a listener of its own, make
the parent open a FIFO, or grow a cache of providers.

One `Broker` serves one run's child: `model/complete` through the selected provider, at most
`MAX_MODEL_CALLS` at once (more wait); `tool/approve` through the run's policy; `agent/event`
notifications relayed as `ChildEvent`s (events for another run id are dropped). The broker
counts what it brokered — model calls and the tokens each provider reported — so the result's
usage is the parent's count, not the child's claim, and it enforces the definition's budgets
(`maxIterations` turns, `tokenBudget` tokens) and any budget the run shares with others (a
delegation tree's tokens) by reservation (`budget.py`): each turn is admitted only if every
budget allows it counting the turns already in flight, and is settled with what the provider
reported. An honest child, one turn at a time, never meets them; a turn past a budget is
refused before it reaches the model and the run is ended. A broker that is `close()`d (a
continuable run between activations) refuses every request: no turn is served outside an
activation. A broker that is `stop()`ped (its run was stopped) refuses every request from that
instant and abandons the requests in flight: a model turn under way is cancelled, its answer
never delivered and its tokens never billed; it counts what it abandoned and, as the stop's
receipt asks, any turn admitted or token billed after the stop (none, by construction).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from tether.parent.models import ModelProvider
from tether.parent.run.budget import (
    Admission,
    Budget,
    Spent,
    admit,
    admit_now,
    turn_costs,
)
from tether.parent.run.events import ChildEvent
from tether.parent.trace.format import Slot, TurnError
from tether.parent.trace.recorder import RunTrace
from tether.protocol import ErrorCode, RemoteError, WireError
from tether.protocol.messages import (
    AgentDefinition,
    AgentEventParams,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolApproveParams,
    ToolApproveResult,
    ToolCallParams,
    ToolCallResult,
    ToolSpec,
    Usage,
)

log = logging.getLogger("tether.parent")

ApprovePolicy = Callable[[ToolApproveParams], Awaitable[ToolApproveResult] | ToolApproveResult]
EventSink = Callable[[ChildEvent], None]
TurnHook = Callable[[ModelCompleteParams, ModelCompleteResult], Awaitable[None]]
"""Told of every brokered model turn (the request and the answer), before the child gets it."""


@dataclass(frozen=True)
class ParentTool:
    """A tool the parent serves for one run (`tool/call`): what the model is shown (`spec`),
    and what runs it. `call` returns the result the model reads; it should not raise, and if
    it does the model hears a short error instead (the run goes on)."""

    spec: ToolSpec
    call: Callable[[ToolCallParams], Awaitable[ToolCallResult]]


MAX_MODEL_CALLS = 4
"""`model/complete` requests of one child served at once; more wait their turn."""
MAIN = "main"
COMPACTION = "compaction"


@dataclass(frozen=True)
class RunModels:
    """The providers one run may use, resolved by the parent before the spawn."""

    main: ModelProvider | None = None
    main_name: str | None = None
    """The model string `main` was built from (`None` for a provider object)."""
    compaction: ModelProvider | None = None
    compaction_name: str | None = None
    aliases: frozenset[str] = frozenset()
    """More names that mean `main`: the definition's own model string when the caller's
    `model=` overrode it (the child still names the one its definition carries)."""

    def select(self, name: str | None, purpose: str) -> ModelProvider:
        """The provider for one `model/complete`; raises `WireError` for a name the parent did
        not configure for this run, or when no model is configured at all."""
        if name in (None, "", MAIN) or name == self.main_name or name in self.aliases:
            if purpose == COMPACTION and name in (None, "") and self.compaction is not None:
                return self.compaction
            return self._main()
        if name == COMPACTION or (name is not None and name == self.compaction_name):
            if self.compaction is not None:
                return self.compaction
            return self._main()
        raise WireError(
            ErrorCode.NO_MODEL,
            f"model {name[:80]!r} is not one this run may use; the parent configured "
            f"{self._configured()}",
        )

    def slot_of(self, provider: ModelProvider, purpose: str) -> tuple[Slot, str | None]:
        """Which of the run's models `provider` is (for a call of `purpose`), and its name."""
        if provider is self.compaction and (provider is not self.main or purpose == COMPACTION):
            return "compaction", self.compaction_name
        return "main", self.main_name

    def bind(self, run_id: str, workspace: str) -> None:
        """Tell a provider that serves runs one by one (a trace's replay) of a new run."""
        for provider in dict.fromkeys(p for p in (self.main, self.compaction) if p is not None):
            bind = getattr(provider, "bind_run", None)
            if callable(bind):
                bind(run_id, workspace)

    def _main(self) -> ModelProvider:
        if self.main is None:
            raise WireError(
                ErrorCode.NO_MODEL,
                "no model is configured for this run (pass model=..., or --model on the CLI)",
            )
        return self.main

    def _configured(self) -> str:
        names = [f"{MAIN!r}"]
        if self.main_name:
            names.append(repr(self.main_name))
        if self.compaction is not None:
            names.append(f"{COMPACTION!r}")
            if self.compaction_name:
                names.append(repr(self.compaction_name))
        return ", ".join(names)


async def resolve_models(
    model: str | ModelProvider | None, definition: AgentDefinition, *, name: str | None = None
) -> RunModels:
    """Resolve a run's models before its child exists; raises `ValueError` (bad usage) for a
    model string that cannot be built. Model scripts are read off the event loop. `name`: the
    model string a provider object was built from (stored and billed under it)."""
    from tether.parent.models import resolve_model

    async def build(spec: str) -> ModelProvider:
        provider: ModelProvider = await anyio.to_thread.run_sync(resolve_model, spec)
        return provider

    main_name: str | None
    if model is None:
        main_name = definition.model
        main = await build(main_name) if main_name else None
    elif isinstance(model, str):
        main_name = model
        main = await build(model)
    else:
        main_name, main = name, model
    aliases: set[str] = set()
    if definition.model and definition.model != main_name:
        aliases.add(definition.model)
    compaction_name = definition.compaction_model
    compaction = None
    if compaction_name:
        compaction = main if compaction_name == main_name else await build(compaction_name)
    return RunModels(main, main_name, compaction, compaction_name, frozenset(aliases))


@dataclass
class Brokered:
    """What the parent brokered for one run: its own count, never the child's claim."""

    model_calls: int = 0
    turns: int = 0
    """`model/complete` calls for a turn of the agent (not compaction)."""
    input_tokens: int = 0
    output_tokens: int = 0
    approvals: int = 0
    parent_tool_calls: int = 0
    events: int = 0
    dropped_events: int = 0
    by_purpose: dict[str, int] = field(default_factory=dict)

    @property
    def usage(self) -> Usage:
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)


class Broker:
    def __init__(
        self,
        run_id: str,
        models: RunModels,
        approve: ApprovePolicy | None,
        publish: EventSink,
        *,
        max_turns: int | None = None,
        token_budget: int | None = None,
        budgets: Sequence[Budget] = (),
        on_exhausted: Callable[[str], None] | None = None,
        parent_tools: Sequence[ParentTool] = (),
        on_turn: TurnHook | None = None,
        trace: RunTrace | None = None,
    ) -> None:
        """`max_turns` / `token_budget`: the definition's budgets, enforced here too; `budgets`:
        token budgets this run shares with others (a delegation tree's). Past any of them the
        request is refused and `on_exhausted(why)` is told (the run ends). `trace`: record
        every model call, parent tool, approval and the child's tool reports there."""
        self.run_id = run_id
        self.models = models
        self._approve = approve
        self._publish = publish
        self.turn_budget = (
            Budget(max_turns, "turns", "its iteration budget") if max_turns is not None else None
        )
        self.token_budget = (
            Budget(token_budget, "tokens", "its token budget") if token_budget is not None else None
        )
        self.shared = tuple(budgets)
        self._on_exhausted = on_exhausted
        self.exhausted: str | None = None
        self.closed: str | None = None
        """Why this broker serves no more requests (`close()`), if it does not."""
        self._parent_tools = {t.spec.name: t for t in parent_tools}
        self._on_turn = on_turn
        self.trace = trace
        self.last_request: list[ChatMessage] = []
        """The transcript the child sent with its latest model turn: the run's completed turns
        as the parent saw them (a fork's history is cut from it)."""
        self.brokered = Brokered()
        # fast_acquire: no event-loop turn while a slot is free.
        self._model_slots = anyio.Semaphore(MAX_MODEL_CALLS, fast_acquire=True)
        self.stopped_at: float | None = None
        """When the run's stop was asked (`time.monotonic()`), if it was."""
        self.turns_after_stop = 0
        self.tokens_after_stop = 0
        self.turns_abandoned = 0
        self._serving: set[anyio.CancelScope] = set()

    def close(self, why: str) -> None:
        """Refuse every request from now on (`why` is what the child hears)."""
        self.closed = why

    def stop(self, why: str) -> None:
        """The run is being stopped: refuse every request from this instant and abandon the
        ones in flight (see the module docstring)."""
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()
        self.closed = why
        for scope in self._serving:
            scope.cancel()

    async def on_request(self, method: str, params: Any) -> Any:
        if self.closed is not None:
            raise WireError(ErrorCode.RUN_IDLE, self.closed)
        with anyio.CancelScope() as scope:
            self._serving.add(scope)
            try:
                return await self._serve(method, params)
            finally:
                self._serving.discard(scope)
        # Cancelled by `stop()`: abandoned, and the child hears why.
        if method == "model/complete":
            self.turns_abandoned += 1
        raise WireError(ErrorCode.RUN_IDLE, self.closed or "the run was stopped")

    async def _serve(self, method: str, params: Any) -> Any:
        if method == "model/complete":
            assert isinstance(params, ModelCompleteParams)
            return await self._complete(params)
        if method == "tool/approve":
            assert isinstance(params, ToolApproveParams)
            return await self._approve_tool(params)
        if method == "tool/call":
            assert isinstance(params, ToolCallParams)
            return await self._call_parent_tool(params)
        raise WireError(ErrorCode.METHOD_NOT_FOUND, f"the parent does not serve {method!r}")

    def on_notification(self, method: str, params: Any) -> None:
        if method != "agent/event" or not isinstance(params, AgentEventParams):
            return
        if params.run_id != self.run_id:
            self.brokered.dropped_events += 1
            return
        self.brokered.events += 1
        # The decoded dict is this event's own (nothing else holds it): no copy.
        self._publish(ChildEvent(params.run_id, params.seq, params.kind, params.data))
        if self.trace is not None:
            self.trace.child_event(params)

    def _draws(
        self, params: ModelCompleteParams, provider: ModelProvider
    ) -> list[tuple[Budget, int]]:
        """Every budget this turn draws from, with its cost on it (a compaction is no turn)."""
        budgets = [self.turn_budget] if params.purpose == "turn" else []
        budgets += [self.token_budget, *self.shared]
        present = [b for b in budgets if b is not None]
        return turn_costs(present, params, getattr(provider, "max_tokens", None))

    async def _admit(self, params: ModelCompleteParams, provider: ModelProvider) -> Admission:
        try:
            draws = self._draws(params, provider)
            return admit_now(draws) or await admit(draws)
        except Spent as exc:
            why = self._why(exc)
        if self.exhausted is None:
            self.exhausted = why
            if self._on_exhausted is not None:
                self._on_exhausted(why)
        raise WireError(ErrorCode.BUDGET_EXHAUSTED, why)

    def _why(self, exc: Spent) -> str:
        budget = exc.budget
        if budget is self.turn_budget:
            asked = budget.settled + budget.reserved + 1
            return f"the child asked for model turn {asked}, past its {budget.total}"
        if budget is self.token_budget:
            return f"the run used {budget.settled} tokens, past its token budget of {budget.total}"
        return str(exc)

    async def _complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        trace = self.trace
        began = trace.begin() if trace is not None else None
        try:
            provider = self.models.select(params.model, params.purpose)
            admission = await self._admit(params, provider)
        except WireError as exc:
            if trace is not None and began is not None:
                error = TurnError(code=exc.code, message=exc.message, by="parent")
                trace.turn(params, began, slot=None, model=None, error=error)
            raise
        if self.stopped_at is not None:
            self.turns_after_stop += 1  # the receipt's witness: `stop()` leaves no way here
        try:
            slots = self._model_slots
            try:
                # A free slot without anyio's cancellation check (a walk of this task's cancel
                # scopes): the model call right after it is where a cancellation lands.
                slots.acquire_nowait()
            except anyio.WouldBlock:
                await slots.acquire()
            try:
                result = await provider.complete(params)
            except RemoteError as exc:
                raise WireError(exc.code, exc.message, exc.data) from None
            except WireError:
                raise
            except Exception as exc:
                log.error("run %s: the model provider failed", self.run_id, exc_info=exc)
                raise WireError(
                    ErrorCode.MODEL_ERROR, f"the model provider failed: {type(exc).__name__}"
                ) from None
            finally:
                slots.release()
        except BaseException as exc:
            admission.release()
            if trace is not None and began is not None and isinstance(exc, WireError):
                slot, name = self.models.slot_of(provider, params.purpose)
                error = TurnError(code=exc.code, message=exc.message, by="model")
                trace.turn(params, began, slot=slot, model=name, error=error)
            raise
        used = max(0, result.usage.input_tokens) + max(0, result.usage.output_tokens)
        admission.settle(used)
        if self.stopped_at is not None:
            self.tokens_after_stop += used  # likewise
        b = self.brokered
        b.model_calls += 1
        b.by_purpose[params.purpose] = b.by_purpose.get(params.purpose, 0) + 1
        if params.purpose == "turn":
            b.turns += 1
        b.input_tokens += max(0, result.usage.input_tokens)
        b.output_tokens += max(0, result.usage.output_tokens)
        if trace is not None and began is not None:
            # Before the child sees the answer, like `on_turn`.
            slot, name = self.models.slot_of(provider, params.purpose)
            trace.turn(params, began, slot=slot, model=name, response=result)
        if params.purpose == "turn":
            self.last_request = list(params.messages)
            if self._on_turn is not None:
                # Before the child sees the answer: a turn it acts on is already recorded.
                await self._on_turn(params, result)
        return result

    def completed_turns(self) -> list[ChatMessage]:
        """The run's transcript up to its latest turn, without system messages: what a forked
        sub-agent starts from (the turn in flight, whose answer is being acted on, is not in
        it)."""
        return [m for m in self.last_request if m.role != "system"]

    async def _call_parent_tool(self, params: ToolCallParams) -> ToolCallResult:
        trace = self.trace
        if trace is None:
            return await call_parent_tool(self._parent_tools, self.run_id, self.brokered, params)
        began = trace.clock()
        try:
            got = await call_parent_tool(self._parent_tools, self.run_id, self.brokered, params)
        except WireError as exc:
            error = TurnError(code=exc.code, message=exc.message, by="parent")
            trace.parent_tool(params, began, error=error)
            raise
        trace.parent_tool(params, began, result=got)
        return got

    async def _approve_tool(self, params: ToolApproveParams) -> ToolApproveResult:
        self.brokered.approvals += 1
        if self._approve is None:
            got = ToolApproveResult(allow=True, reason="allowed by the default policy")
        else:
            answer = self._approve(params)
            got = answer if isinstance(answer, ToolApproveResult) else await answer
        if self.trace is not None:
            self.trace.approval(params, got)
        return got


async def call_parent_tool(
    tools: Mapping[str, ParentTool], run_id: str, brokered: Brokered, params: ToolCallParams
) -> ToolCallResult:
    """A child's `tool/call`: only the tools the parent offered to this run are served (a
    sub-agent asking to delegate, or a child naming a tool it was never given, is refused);
    a tool that fails is an error result for the model, never an error on the wire. Shared by
    the local broker and the placement's relay."""
    tool = tools.get(params.name)
    if tool is None or params.run_id != run_id:
        raise WireError(
            ErrorCode.METHOD_NOT_FOUND,
            f"no parent tool {params.name[:80]!r} is offered to this run",
        )
    brokered.parent_tool_calls += 1
    try:
        return await tool.call(params)
    except Exception as exc:
        log.error("run %s: parent tool %s failed", run_id, params.name, exc_info=exc)
        return ToolCallResult(
            content=f"{params.name} failed in the parent: {type(exc).__name__}",
            is_error=True,
        )
