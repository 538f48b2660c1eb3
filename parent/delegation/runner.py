"""The supervisor runner: every sub-agent a supervised tether child.

Theory of operation
-------------------
`SupervisorRunner(sup, ...)` is the `Runner` a delegation's gate runs its sub-agents with. For
one `RunRequest`:

1. a follow-up (`request.follow_up`, an agent id) goes to that continuable agent
   (`Agents.send`): warm in its live child, else cold from its stored transcript;
2. otherwise the provider: the definition's `provider` (or the task call's `agentType`, which
   the delegator put there) names what runs it: a provider of the supervisor's registry
   (`sup.providers`: `spawn`, a fresh tether child of this supervisor, a sibling of the
   orchestrator's; `fork`, one seeded with the orchestrator's completed turns; `command`,
   `inprocess`, `acp`, and any registered). `providers=` adds runners by name, tried first.
   An unknown name, or bad usage of a provider, is a `spawn_failed` result the orchestrator's
   model reads, never an exception;
3. continuable: with a `keep_alive`, a task's sub-agent of a provider that runs tether's
   protocol (`spawn`, `fork`, `command`, `inprocess`) starts as a continuable agent of
   `sup.agents` under `parent_run` (a durable session; `RunFacts.agent_id` is its id, what
   `send_message` takes). A `fork` sub-agent's session starts with the forked turns, so a
   cold resume carries them. A provider that drives its own agent (`acp`, one a user wrote)
   and a runner of `providers=` run it once, and the facts say why it cannot be continued and
   which providers can (what a refused follow-up tells the model). Every run of such a delegation (a
   verifier too) is guarded as an agent's is (`Agents.guard`: its workspace apart from the
   store, the store's paths denied to its sandbox);
4. the model: decided by the parent, never the child. A definition that names a model runs on
   it (`models=` maps names to provider objects first, else the string is resolved, once per
   runner); one that names none runs on the orchestrator's model (`default_model`). Either way
   the run gets the model with its string (`NamedModel`), which a continuable agent stores for
   a cold resume and the ledger bills. A model that cannot be built is a `spawn_failed` result;
5. the run: one `RunSpec` — the wire definition the gate prepared (sub-agent system prompt,
   mode, step limit, token cap), the fork history, the label as the run's description, the
   run id the gate minted, the tree's budget (its broker reserves every turn against it), the
   child config with the definition's `network` narrowing the delegation's policy (never
   widening it), and *no parent tools*: a sub-agent's model has no `task` tool, and a child
   that asks the parent for one anyway is refused by the broker (no nesting);
6. progress: each of the child's events is relayed through `request.progress`, and each
   decision of its run's egress proxy (`net.allowed`, `net.denied`);
7. the tree budget: when it becomes spent, every run this runner has live is ended as
   `budget_exhausted` (`RunHandle.exhaust`); their results come back to the gate and the
   ledger like any other;
8. cancellation: a cancelled task call disposes its child before the cancellation goes on
   (`Supervisor.run`'s rule), so cancelling an orchestrator leaves no sub-agent behind;
9. stopping: every run is added to a stop line (`tether.parent.run.stop`): the request's (a
   tool call served over MCP), else the runner's `stops` (an orchestration sets the
   orchestrator's), so a stop takes the sub-agents down with it from the instant it is asked,
   and its receipt counts them. Once the line is stopped no sub-agent starts: the request is
   answered `aborted` at once.

The `RunResult` handed back is the supervisor's: usage and step count are the broker's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from tether.parent.agents.service import AgentBusy, AgentError, CannotResume, agents_of
from tether.parent.delegation.gate import RunRequest
from tether.parent.delegation.tool import offered_agent_types
from tether.parent.egress.events import NetEvent
from tether.parent.models import ModelProvider
from tether.parent.process.limits import Limits
from tether.parent.run.events import ChildEvent, Event
from tether.parent.run.handle import RunHandle
from tether.parent.run.plan import follow_up_providers, once
from tether.parent.run.spec import NamedModel, RunSpec
from tether.parent.run.stop import StopLine
from tether.protocol.messages import ApplyOutcome, ApplyPolicy, ChangeSet, Failure, RunResult

if TYPE_CHECKING:
    from tether.parent.process.config import ChildConfig
    from tether.parent.run.budget import Budget
    from tether.parent.run.core import SupervisorCore
    from tether.parent.trace.spec import TraceSpec

SPAWN = "spawn"
ProviderRunner = Callable[[RunRequest], Awaitable[RunResult]]
TREE_SPENT = "the token budget of the whole delegation tree is spent"


class SupervisorRunner:
    def __init__(
        self,
        sup: SupervisorCore,
        *,
        default_model: str | ModelProvider | NamedModel | None = None,
        models: Mapping[str, ModelProvider] | None = None,
        workspace: str | os.PathLike[str] = ".",
        limits: Limits | None = None,
        config: ChildConfig | None = None,
        providers: Mapping[str, ProviderRunner] | None = None,
        keep_alive: float | str | None = None,
        parent_run: str | None = None,
        trace: TraceSpec | None = None,
    ) -> None:
        """`default_model`: what a definition without a model runs on; `models`: provider
        objects by the name a definition gives; `limits` / `config`: each sub-agent child's
        (default: the supervisor's config, no limits); `providers`: more runners by name.

        `keep_alive`: run each task's sub-agent as a continuable agent of `sup.agents` under
        `parent_run` (its child kept alive this long after each answer), where its provider
        allows (see the module docstring). `trace`: trace each sub-agent there (default: the
        supervisor's `trace=`), its header naming `parent_run`."""
        self.sup = sup
        self.default_model = default_model
        self.models = dict(models or {})
        self.workspace = str(Path(workspace).resolve())
        self.limits = limits
        self.config = config
        self.providers: dict[str, ProviderRunner] = dict(providers or {})
        self.keep_alive = keep_alive
        self.parent_run = parent_run
        self.trace = trace
        self._built: dict[str, ModelProvider] = {}
        self.stops: StopLine | None = None
        """The line a stop of the orchestration takes the sub-agents down with (`orchestrate`
        sets it to the orchestrator's run's)."""
        self._live: set[RunHandle] = set()
        self._watched: set[int] = set()

    @property
    def keeps_agents(self) -> bool:
        """Task sub-agents start as continuable agents (a `keep_alive` was given)."""
        return self.keep_alive is not None

    async def __call__(self, request: RunRequest) -> RunResult:
        self._watch(request.budget)
        line = self._line(request)
        if line is not None and line.stop is not None:
            return _stopped(line.stop.reason)
        if request.follow_up is not None:
            return await self.follow_up(request)
        name = request.definition.provider
        provider = self.providers.get(name)
        if provider is not None:
            request.facts.not_continuable = (
                f"it ran on {name!r}, a runner this delegation was given (providers=), which "
                f"runs a sub-agent once and keeps no session; {self._who_can()}"
            )
            return await provider(request)
        if name not in self.sup.providers:
            known = ", ".join(sorted({*self.providers, *self.sup.providers.names()}))
            return _failed(
                f"no sub-agent provider named {name!r} (type {request.definition.type!r}); "
                f"this parent knows: {known}"
            )
        chosen = self.sup.providers.get(name)
        if request.workspace_mode == "layered" and request.continuable and self.keeps_agents:
            # Its layer is the delegation's to apply or discard once its task is settled.
            request.facts.not_continuable = (
                "it ran in a layered workspace, whose layer is gone once its change set is "
                "applied or discarded; start a new task call instead"
            )
            return await self.spawn(request)
        if request.continuable and self.keeps_agents:
            if not chosen.drives_itself:
                return await self.continuable(request)
            request.facts.not_continuable = f"{once(chosen)}; {self._who_can()}"
        return await self.spawn(request)

    def _line(self, request: RunRequest) -> StopLine | None:
        return request.stops if request.stops is not None else self.stops

    def _join(self, request: RunRequest, handle: RunHandle) -> None:
        """A run of this request: a stop of its line takes it down too."""
        line = self._line(request)
        if line is not None:
            line.add(handle)

    def _who_can(self) -> str:
        return f"only sub-agents run by {follow_up_providers(self.sup.providers)} keep a session"

    def agent_types(self) -> dict[str, str]:
        """The providers a model may pick per task call (`agentType`): those of the
        supervisor that run out of process and can run here, with what each is
        (`offered_agent_types`). The `inprocess` provider is never offered to a model (it has
        no isolation)."""
        return offered_agent_types(self.sup.providers)

    def live_run(self, agent_id: str) -> str | None:
        """The run id of a continuable agent's live child (a warm follow-up goes to it)."""
        handle = agents_of(self.sup).live_handle(agent_id)
        return handle.run_id if handle is not None else None

    # --- one run ------------------------------------------------------------------------------

    async def _spec(self, request: RunRequest) -> RunSpec | RunResult:
        try:
            model = await self.model_for(request.definition.model)
        except ValueError as exc:
            return _failed(f"the sub-agent's model cannot be used: {exc}")
        request.facts.model = model.name if isinstance(model, NamedModel) else None
        request.facts.metered = request.budget is not None
        request.facts.run_id = request.run_id
        try:
            config = self.config_for(request)
        except ValueError as exc:
            return _failed(f"the sub-agent's network cannot be used: {exc}")

        return RunSpec(
            prompt=request.prompt,
            agent=request.agent,
            workspace=request.workspace or self.workspace,
            model=model,
            limits=self.limits,
            description=request.label,
            config=config,
            history=request.history,
            on_event=_Relay(request),
            provider=request.definition.provider,
            run_id=request.run_id or None,
            budgets=(request.budget,) if request.budget is not None else (),
            labels={"toolCallId": request.tool_call_id, "subagentId": request.subagent_id},
            workspace_mode="shared" if request.layer is not None else request.workspace_mode,
            layer=request.layer,
            trace=self.trace,
            parent_run=self.parent_run,
        )

    def config_for(self, request: RunRequest) -> ChildConfig | None:
        """The sub-agent's child config: the delegation's (or the supervisor's), its network
        narrowed by the definition's own `network` (at most what the orchestration allows)."""
        entries = request.definition.network_entries()
        if entries is None:
            return self.config
        base = self.config or self.sup.config
        return dataclasses.replace(base, network=base.network_policy.narrowed(entries))

    async def spawn(self, request: RunRequest) -> RunResult:
        """Run the sub-agent once through the supervisor's provider its definition names."""
        spec = await self._spec(request)
        if isinstance(spec, RunResult):
            return spec
        try:
            if self.keeps_agents:  # a run of a delegation that keeps agents (a verifier)
                spec = agents_of(self.sup).guard(spec)
            handle = await self.sup.start(spec)
        except ValueError as exc:
            return _failed(f"the sub-agent could not start: {exc}")
        self._join(request, handle)
        _relay_of(spec).handle = handle
        return await self._outcome(handle, handle.result())

    async def continuable(self, request: RunRequest) -> RunResult:
        """Start the sub-agent as a continuable agent (see `keep_alive`)."""
        spec = await self._spec(request)
        if isinstance(spec, RunResult):
            request.facts.not_continuable = f"it never started ({spec.message})"
            return spec
        assert self.keep_alive is not None
        try:
            agent = await agents_of(self.sup).spawn(
                spec, keep_alive=self.keep_alive, label=request.label, parent_run=self.parent_run
            )
        except ValueError as exc:
            request.facts.not_continuable = f"it never started ({exc})"
            return _failed(f"the sub-agent could not start: {exc}")
        request.bind_agent(agent.id)
        self._join(request, agent.run)
        _relay_of(spec).handle = agent.run
        return await self._outcome(agent.run, agent.result())

    async def follow_up(self, request: RunRequest) -> RunResult:
        """A follow-up message to a continuable agent this delegation started."""
        assert request.follow_up is not None
        request.facts.agent_id = request.follow_up
        request.facts.continuable = True
        request.facts.metered = request.budget is not None
        agents = agents_of(self.sup)
        model = await self.model_for(request.definition.model)
        request.facts.model = model.name if isinstance(model, NamedModel) else None

        relay = _Relay(request)

        def started(handle: RunHandle) -> None:
            request.facts.run_id = handle.run_id
            relay.handle = handle
            self._live.add(handle)
            self._join(request, handle)

        try:
            return await agents.send(
                request.follow_up,
                request.prompt,
                model=model,
                on_event=relay,
                budgets=(request.budget,) if request.budget is not None else (),
                run_id=request.run_id or None,
                on_start=started,
            )
        except AgentBusy as exc:
            return _failed(f"{exc.message}; try again later")
        except (CannotResume, AgentError, ValueError) as exc:
            return _failed(str(exc))
        finally:
            self._live = {h for h in self._live if not h.done or h.alive}

    async def _outcome(self, handle: RunHandle, result: Awaitable[RunResult]) -> RunResult:
        self._live.add(handle)
        try:
            try:
                return await result
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    handle.abort()
                    await handle.wait()
                raise
        finally:
            self._live.discard(handle)

    # --- layered sub-agents' change sets -------------------------------------------------------

    async def apply_changes(self, cs: ChangeSet, policy: ApplyPolicy) -> ApplyOutcome:
        """Apply a layered sub-agent's change set (the gate decided to): the supervisor's
        apply, which discards the layer once applied."""
        return await self.sup.apply(cs, policy=policy)

    async def discard_changes(self, cs: ChangeSet) -> None:
        try:
            await self.sup.discard(cs)
        except (OSError, ValueError):
            pass  # gone already

    async def model_for(self, name: str | None) -> NamedModel | ModelProvider | None:
        """The model a definition's `model` names (the default model for `None`), with its
        string when it has one; raises `ValueError` for a model string that cannot be built."""
        if name is None:
            default = self.default_model
            if isinstance(default, str):
                return NamedModel(default, await self.resolve(default))
            return default
        return NamedModel(name, await self.resolve(name))

    async def resolve(self, name: str) -> ModelProvider:
        """A model by name: one of `models`, else the model string built (once)."""
        if name in self.models:
            return self.models[name]
        built = self._built.get(name)
        if built is None:
            from tether.parent.models import resolve_model

            built = await anyio.to_thread.run_sync(resolve_model, name)
            self._built[name] = built
        return built

    # --- the tree budget ----------------------------------------------------------------------

    def _watch(self, budget: Budget | None) -> None:
        if budget is not None and id(budget) not in self._watched:
            self._watched.add(id(budget))
            budget.on_spent.append(lambda why: self.stop_all(TREE_SPENT))

    def stop_all(self, why: str) -> None:
        """End every live sub-agent run as `budget_exhausted`."""
        for handle in list(self._live):
            handle.exhaust(why)

    @property
    def live(self) -> int:
        """Sub-agent runs going on right now."""
        return len(self._live)


class _Relay:
    """A run's events to `request.progress`, each with the tokens the run's broker has counted
    so far (`request.report_usage`: the live figures a `subagent.progress` event shows)."""

    def __init__(self, request: RunRequest) -> None:
        self.request = request
        self.handle: RunHandle | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, NetEvent):
            # The sub-agent's egress proxy decided: relayed as progress of the sub-agent.
            self.request.progress(
                event.kind,
                {
                    "host": event.host,
                    "port": event.port,
                    "reason": event.reason,
                    "bytesUp": event.bytes_up,
                    "bytesDown": event.bytes_down,
                },
            )
            return
        if not isinstance(event, ChildEvent):
            return
        if self.handle is not None:
            self.request.report_usage(self.handle.broker.brokered.usage)
        self.request.progress(event.kind, event.data)


def _relay_of(spec: RunSpec) -> _Relay:
    assert isinstance(spec.on_event, _Relay)
    return spec.on_event


def _stopped(reason: str) -> RunResult:
    return RunResult(
        success=False,
        status="aborted",
        message=f"not started: the delegation was stopped ({reason})",
        failure=Failure(kind="cancelled"),
    )


def _failed(message: str) -> RunResult:
    return RunResult(
        success=False, status="error", message=message, failure=Failure(kind="spawn_failed")
    )
