"""The supervisor runner: every sub-agent a supervised tether child.

Theory of operation
-------------------
`SupervisorRunner(sup, ...)` is the `Runner` a `Delegator` runs its sub-agents with. For one
`RunRequest`:

1. provider: the definition's `provider` (or the task call's `agentType`, which the delegator
   put there) names what runs it: a provider of the supervisor's registry (`sup.providers`:
   `spawn`, a fresh tether child of this supervisor, a sibling of the orchestrator's; `fork`,
   one seeded with the orchestrator's completed turns; `command`, `inprocess`, `acp`, and any
   registered), each run through `Supervisor.start(provider=...)`. `providers=` adds runners
   by name, tried first. An unknown name, or bad usage of a provider, is a `spawn_failed`
   result the orchestrator's model reads, never an exception.
2. model: decided by the parent, never the child. A definition that names a model runs on it
   (`models=` maps names to provider objects first, else the string is resolved, once per
   runner); a definition that names none runs on the orchestrator's model (`default_model`).
   A model that cannot be built is a `spawn_failed` result.
3. the run: `Supervisor.start` with the wire definition the delegator prepared (sub-agent
   system prompt, mode, step limit, token cap), the fork history, the label as the run's
   description, and *no parent tools*: a sub-agent's model has no `task` tool, and a child
   that asks the parent for one anyway is refused by the broker (no nesting). Sub-agent runs are
   not continuable unless the runner has a `keep_alive`: then each `spawn` sub-agent is a
   continuable agent (`tether.parent.agents.service`) its orchestrator continues with
   `send_message`.
4. progress: each of the child's events is relayed through `request.progress`.
5. usage: after every brokered turn the broker's running count goes to `request.report_usage`
   (the child's own claims are never used), then the tree budget is checked; once
   `request.over_budget()` holds, every run this runner has live is ended as
   `budget_exhausted` (`RunHandle.exhaust`); their results come back to the delegator and the
   ledger like any other.
6. cancellation: a cancelled task call disposes its child before the cancellation goes on
   (`Supervisor.run`'s rule), so cancelling an orchestrator leaves no sub-agent behind.

The `RunResult` handed back is the supervisor's: usage and step count are the broker's.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from tether.parent.agents.service import agents_of
from tether.parent.delegation.delegator import RunRequest
from tether.parent.models import ModelProvider
from tether.parent.process.limits import Limits
from tether.parent.run.events import ChildEvent, Event
from tether.protocol.messages import Failure, ModelCompleteParams, ModelCompleteResult, RunResult

if TYPE_CHECKING:
    from tether.parent.process.config import ChildConfig
    from tether.parent.run.core import SupervisorCore
    from tether.parent.run.handle import RunHandle

SPAWN = "spawn"
ProviderRunner = Callable[[RunRequest], Awaitable[RunResult]]
TREE_SPENT = "the token budget of the whole delegation tree is spent"


class SupervisorRunner:
    def __init__(
        self,
        sup: SupervisorCore,
        *,
        default_model: str | ModelProvider | None = None,
        models: Mapping[str, ModelProvider] | None = None,
        workspace: str | os.PathLike[str] = ".",
        limits: Limits | None = None,
        config: ChildConfig | None = None,
        providers: Mapping[str, ProviderRunner] | None = None,
        keep_alive: float | str | None = None,
        parent_run: str | None = None,
    ) -> None:
        """`default_model`: what a definition without a model runs on; `models`: provider
        objects by the name a definition gives; `limits` / `config`: each sub-agent child's
        (default: the supervisor's config, no limits); `providers`: more runners by name.

        `keep_alive`: run each `spawn` sub-agent as a continuable agent of `sup.agents` under
        `parent_run` (a durable session; its child kept alive this long after each answer;
        the task result's `subagentId` is its agent id, for `send_message`). Sub-agents of
        other providers (`fork`, `acp`, ...) run once, as without it."""
        self.sup = sup
        self.default_model = default_model
        self.models = dict(models or {})
        self.workspace = str(Path(workspace).resolve())
        self.limits = limits
        self.config = config
        self.providers: dict[str, ProviderRunner] = dict(providers or {})
        self.keep_alive = keep_alive
        self.parent_run = parent_run
        self._built: dict[str, ModelProvider] = {}
        self._live: set[RunHandle] = set()

    async def __call__(self, request: RunRequest) -> RunResult:
        name = request.definition.provider
        provider = self.providers.get(name)
        if provider is not None:
            return await provider(request)
        if name == SPAWN and self.keep_alive is not None:
            return await self.continuable(request)
        if name in self.sup.providers:
            return await self.spawn(request)
        known = ", ".join(sorted({*self.providers, *self.sup.providers.names()}))
        return _failed(
            f"no sub-agent provider named {name!r} (type {request.definition.type!r}); "
            f"this parent knows: {known}"
        )

    def agent_types(self) -> dict[str, str]:
        """The providers a model may pick per task call (`agentType`): those of the
        supervisor that run out of process and can run here, with what each is. The
        `inprocess` provider is never offered to a model (it has no isolation)."""
        out: dict[str, str] = {}
        for provider in self.sup.providers:
            if not provider.isolated:
                continue
            try:
                if provider.problem(None) is not None:
                    continue
            except Exception:
                continue
            out[provider.name] = provider.summary or provider.name
        return out

    # --- the spawn provider -------------------------------------------------------------------

    async def spawn(self, request: RunRequest) -> RunResult:
        """Run the sub-agent through the supervisor's provider its definition names (`spawn`
        by default: a fresh tether child of this supervisor)."""
        try:
            model = await self.model_for(request.definition.model)
        except ValueError as exc:
            return _failed(f"the sub-agent's model cannot be used: {exc}")
        box: list[RunHandle] = []

        def relay(event: Event) -> None:
            if isinstance(event, ChildEvent):
                request.progress(event.kind, event.data)

        async def counted(params: ModelCompleteParams, result: ModelCompleteResult) -> None:
            if not box:
                return
            request.report_usage(box[0].broker.brokered.usage)
            if request.over_budget():
                self.stop_all(TREE_SPENT)

        try:
            handle = await self.sup.start(
                request.prompt,
                agent=request.agent,
                workspace=request.workspace or self.workspace,
                model=model,
                limits=self.limits,
                description=request.label,
                config=self.config,
                history=request.history,
                on_event=relay,
                on_turn=counted,
                provider=request.definition.provider,
            )
        except ValueError as exc:
            return _failed(f"the sub-agent could not start: {exc}")
        box.append(handle)
        self._live.add(handle)
        try:
            try:
                result = await handle.result()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    handle.abort()
                    await handle.wait()
                raise
        finally:
            self._live.discard(handle)
        request.report_usage(result.usage)
        return result

    async def continuable(self, request: RunRequest) -> RunResult:
        """Run the sub-agent as a continuable agent of the supervisor (see `keep_alive`)."""
        from tether.parent.agents.tools import run_continuable

        assert self.keep_alive is not None
        try:
            model = await self.model_for(request.definition.model)
        except ValueError as exc:
            return _failed(f"the sub-agent's model cannot be used: {exc}")
        return await run_continuable(
            agents_of(self.sup),
            request,
            keep_alive=self.keep_alive,
            parent_run=self.parent_run,
            model=model,
            limits=self.limits,
            config=self.config,
            workspace=request.workspace or self.workspace,
        )

    async def model_for(self, name: str | None) -> ModelProvider | None:
        """The provider a definition's `model` names (the default model for `None`); raises
        `ValueError` for a model string that cannot be built."""
        if name is None:
            default = self.default_model
            return await self.resolve(default) if isinstance(default, str) else default
        return await self.resolve(name)

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

    def stop_all(self, why: str) -> None:
        """End every live sub-agent run as `budget_exhausted`."""
        for handle in list(self._live):
            handle.exhaust(why)

    @property
    def live(self) -> int:
        """Sub-agent runs going on right now."""
        return len(self._live)


def _failed(message: str) -> RunResult:
    return RunResult(
        success=False, status="error", message=message, failure=Failure(kind="spawn_failed")
    )
