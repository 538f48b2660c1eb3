"""Continuable agents: a durable session plus at most one live child, resumed warm or cold.

    async with Supervisor(state_dir=...) as sup:
        agent = await sup.spawn_agent("Survey src/", agent="explorer", keep_alive="5m")
        first = await agent.result()
        more = await sup.send_message(agent.id, "And the tests?")   # warm: the same child
        ...
        later = await sup.send_message(agent.id, "Anything else?")  # cold if the child is gone

Theory of operation
-------------------
An agent is a session in the `SessionStore` (its definition, transcript, usage, reports and
status, under an id like `ag_…`) plus, while it works or idles, one live child holding the
session's *activation* (its lease: no other process may start a child for it). `Agents` is
owned by a `Supervisor`; it opens the store on first use, in a task of its own group.

Per agent, this process keeps an `_Agent`: a one-slot semaphore that serializes what happens
to the agent here (its first answer, each message, the release of its lease), the activation
while held, the live `RunHandle` (a continuable run, see `run/handle.py`) and the `Recorder` that
mirrors the stored transcript. Messages to one agent queue on its slot in arrival order;
different agents never share a slot, so they run in parallel.

- every child of an agent runs in a workspace apart from the store (`guard`: one inside the
  other is bad usage, the default state directory under HOME included) and its sandbox is
  denied every path of the store; a cold resume from stored settings re-checks the stored
  model strings (`settings.spec_from_stored`);
- `spawn`: the run starts first (so bad usage raises before anything is stored); the session is
  then created, its lease taken and the prompt stored; the child's first model turn waits for
  that. A task of this group stores the first answer and frees the slot.
- `send`: a child alive here gets the message warm (`agent/message`, after the user message is
  stored); otherwise — the keep-alive passed, the child died, or this process never had it —
  the lease is taken (or kept), the transcript read, the open tool calls at its end closed, the
  message stored, and a fresh child starts with the transcript as its history and the message
  as its prompt (a cold resume). What is needed to start it comes from this process's memory of
  the spawn, else from the settings stored with the session (plus `model=`).
- every brokered turn is stored before the child gets the answer (`on_turn`); every `report`
  before the child's next message is read; an activation's end (status, summary, question, the
  closing tool results, usage not yet counted) before its result is handed back.
- a tending task per child holds the lease while the child lives, cuts the child at once if
  the lease is lost (taken over by another process), and releases the lease after the child
  is gone. A session left `running` reads `interrupted` once its holder is gone.
- traces (docs/traces.md): an agent's first run, when traced, says which agent it became (an
  `agent` line); its warm follow-ups are in the same run's trace, and a cold resume in this
  process appends to that file too. A cold resume in another process starts a trace of its
  own whose header names the agent.

Storage trouble (a full disk, a read-only or damaged store: `StoreUnavailable` and its kinds)
never escapes the supervisor. Where a caller waits (`spawn`, `send`, `list`, `show`) it is that
caller's exception, raised before anything the trouble could leave half-done; where none does
(a heartbeat, a lease released after the child went) it becomes a `StoreTrouble` event and a
note in the agent's next result, and the child is disposed all the same (the lease goes stale).

Limits: the run's `Limits` (wall, idle, memory, ...) and the definition's `maxIterations` and
`tokenBudget` apply to each activation; `token_total` bounds the tokens of all activations of
the session together (counted by the parent, stored with the session): each activation's token
budget is capped at what is left of it, and a message to an agent with nothing left is answered
`budget_exhausted` without starting anything. The keep-alive bounds how long an idle child
lives.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import msgspec

from tether.parent.agents.recorder import Recorder
from tether.parent.agents.sessions import (
    Activation,
    AgentDetail,
    AgentStatus,
    AgentSummary,
    Busy,
    LeaseLost,
    LeasePolicy,
    SessionError,
    SessionStore,
    Unavailable,
    parse_agent_id,
)
from tether.parent.agents.sessions.paths import (
    resolve_state_dir,
    store_paths,
    workspace_problem,
)
from tether.parent.agents.settings import (
    AgentSpec,
    activation_budget,
    parse_keep_alive,
    spec_from_stored,
    stored_settings,
)
from tether.parent.agents.transcript import closing_results
from tether.parent.process.limits import Limits
from tether.parent.roles.builtins import resolve_agent
from tether.parent.run.budget import Budget
from tether.parent.run.events import EventCallback, StoreTrouble
from tether.parent.run.evidence import recheck
from tether.parent.run.handle import RunHandle
from tether.parent.run.provider import Provider
from tether.parent.run.spec import Continuation, ModelSpec, RunSpec, spec_of
from tether.parent.trace.recorder import RunTrace
from tether.protocol.messages import AgentDefinition, ChatMessage, Failure, RunResult

if TYPE_CHECKING:
    from tether.parent.run.core import SupervisorCore

log = logging.getLogger("tether.parent")

DEFAULT_KEEP_ALIVE = 300.0
"""How long an agent's child idles after an answer before it is disposed (seconds)."""
PROVIDER = "tether"
"""The store's `provider` for agents run as tether children."""


class AgentError(Exception):
    """A message could not be delivered; the text is safe to show to a model."""

    @property
    def message(self) -> str:
        return str(self)


class AgentBusy(AgentError):
    """Another process holds the agent's activation (its child lives there)."""


class AgentUnavailable(AgentError):
    """No such agent, or its session is closed."""


class CannotResume(AgentError):
    """This process lacks what it takes to start the agent's child (its model, its
    workspace)."""


@dataclass(eq=False)
class _Agent:
    id: str
    slot: anyio.Semaphore = field(default_factory=lambda: anyio.Semaphore(1))
    activation: Activation | None = None
    handle: RunHandle | None = None
    recorder: Recorder | None = None
    users: int = 0
    tended: anyio.Event = field(default_factory=anyio.Event)
    """Set when the latest child is gone and its lease released."""


class AgentHandle:
    """A continuable agent just spawned: its `id` (for `send_message`) and its first answer."""

    def __init__(self, agent_id: str, run: RunHandle, label: str) -> None:
        self.id = agent_id
        self.run = run
        """The run of the agent's first child (events, `cancel()`)."""
        self.label = label
        self._done = anyio.Event()
        self._result: RunResult | None = None

    @property
    def run_id(self) -> str:
        return self.run.run_id

    async def result(self) -> RunResult:
        """The first activation's result, once it is stored."""
        await self._done.wait()
        assert self._result is not None
        return self._result

    def _set(self, result: RunResult) -> None:
        self._result = result
        self._done.set()


class Agents:
    """The continuable agents of one supervisor (see the module docstring)."""

    def __init__(
        self,
        sup: SupervisorCore,
        tg: anyio.abc.TaskGroup,
        state_dir: str | os.PathLike[str] | None = None,
        lease: LeasePolicy | None = None,
    ) -> None:
        """`tg`: the supervisor's task group, where the store and the tending tasks run;
        `lease`: how stale a lease must be to be taken over, how often it is renewed."""
        self._sup = sup
        self._tg: anyio.abc.TaskGroup | None = tg
        self._state_dir = state_dir
        self._lease = lease
        self._troubles: dict[str, dict[str, str]] = {}
        """Per agent, what the store failed to do that no caller heard: its next result says."""
        self.state_dir = resolve_state_dir(state_dir)
        """Where the session store is (the default resolved now)."""
        self._store: SessionStore | None = None
        self._store_lock = anyio.Lock()
        self._closing = anyio.Event()
        self._agents: dict[str, _Agent] = {}
        self._specs: dict[str, AgentSpec] = {}
        self._runs: dict[str, str] = {}
        self._traces: dict[str, RunTrace] = {}
        """The trace of each agent's first run here: its cold resumes append to it."""
        self._tending = 0
        self._quiet = anyio.Event()
        self._shutting = False

    # --- lifetime -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Dispose of every child (shielded), release every lease and close the store (its task
        ends: the supervisor's group waits for it)."""
        self._shutting = True
        with anyio.CancelScope(shield=True):
            for agent in list(self._agents.values()):
                if agent.handle is not None:
                    agent.handle.abort()
            while self._tending:
                await self._quiet.wait()
            self._closing.set()
            self._tg = None

    async def store(self) -> SessionStore:
        """The session store, opened on first use (`SchemaTooNew`, `StoreUnavailable` if it
        cannot be)."""
        async with self._store_lock:
            if self._store is None:
                if self._tg is None or self._closing.is_set():
                    raise RuntimeError("use the Supervisor as `async with Supervisor() as sup:`")
                await self._tg.start(self._keep_store)
            assert self._store is not None
            return self._store

    async def _keep_store(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        store_of = SessionStore(self.state_dir, lease=self._lease, on_trouble=self._trouble)
        async with store_of as store:
            self._store = store
            task_status.started()
            await self._closing.wait()
        self._store = None

    def _trouble(self, agent_id: str, message: str) -> None:
        """A store write nobody waited for failed: an event now, a note in the next result."""
        # A failing heartbeat repeats itself: the first of each kind says it.
        self._troubles.setdefault(agent_id, {}).setdefault(message.split(":", 1)[0], message)
        agent = self._agents.get(agent_id)
        handle = agent.handle if agent is not None else None
        if handle is not None:
            handle.publish(StoreTrouble(agent_id, message, handle.run_id))  # its on_event too
        else:
            self._sup.publish(StoreTrouble(agent_id, message))

    def guard(self, run: RunSpec) -> RunSpec:
        """`run` as a run that uses the store: `ValueError` (bad usage, naming both paths) when
        its workspace and the store's directory lie one inside the other; otherwise the run
        with the store's paths denied to its sandbox (`ChildConfig.deny_paths`)."""
        problem = workspace_problem(self.state_dir, run.workspace, default=self._state_dir is None)
        if problem is not None:
            raise ValueError(problem)
        cfg = run.config or self._sup.config
        denied = tuple(dict.fromkeys((*cfg.deny_paths, *store_paths(self.state_dir))))
        return run.replace(config=dataclasses.replace(cfg, deny_paths=denied))

    # --- queries ------------------------------------------------------------------------------

    async def list(
        self,
        *,
        status: AgentStatus | Sequence[AgentStatus] | None = None,
        parent_run: str | None = None,
        limit: int = 200,
    ) -> list[AgentSummary]:
        """Agents in the store, most recently updated first (see `SessionStore.list_agents`)."""
        store = await self.store()
        return await store.list_agents(status=status, parent_run=parent_run, limit=limit)

    async def show(self, agent_id: str, *, tail: int | None = None) -> AgentDetail | None:
        store = await self.store()
        return await store.show(agent_id, tail=tail)

    def is_warm(self, agent_id: str) -> bool:
        """The agent's child lives in this process and takes a message warm."""
        agent = self._agents.get(agent_id)
        return agent is not None and agent.handle is not None and agent.handle.alive

    def live_handle(self, agent_id: str) -> RunHandle | None:
        """The run of the agent's child alive in this process, if it takes a message warm."""
        agent = self._agents.get(agent_id)
        if agent is None or agent.handle is None or not agent.handle.alive:
            return None
        return agent.handle

    def agent_of(self, run_id: str) -> str | None:
        """The agent whose child runs `run_id` (while it lives)."""
        return self._runs.get(run_id)

    # --- spawn --------------------------------------------------------------------------------

    async def spawn(
        self,
        spec: RunSpec | str | None = None,
        /,
        *,
        keep_alive: float | str = DEFAULT_KEEP_ALIVE,
        label: str = "",
        parent_run: str | None = None,
        token_total: int | None = None,
        **fields: Any,
    ) -> AgentHandle:
        """Start a continuable agent: a new session and its first child. `spec` (or a prompt
        and the spec's fields as keywords, as for `Supervisor.start`) is the first child's run;
        `keep_alive`: how long each child idles after an answer; `token_total`: the tokens of
        every activation together. Raises `ValueError` for bad usage (before anything is
        spawned or stored)."""
        run = spec_of(spec, fields)
        _check_agent_run(run)
        definition = resolve_agent(run.agent)
        keep = parse_keep_alive(keep_alive)
        run = self.guard(run)
        if token_total is not None and (isinstance(token_total, bool) or token_total < 1):
            raise ValueError(f"token_total must be a positive number of tokens, not {token_total}")
        if run.fork_from is not None:
            # A fork's turns become the stored history, so a cold resume carries them too.
            turns = run.fork_from.broker.completed_turns()
            run = run.replace(fork_from=None, history=(*turns, *run.history))
        prompt, history = run.prompt, run.history
        agent_spec = AgentSpec(_template(run, definition), keep, token_total)
        ws = agent_spec.workspace
        store = await self.store()
        recorder = Recorder()
        budget = activation_budget(definition, token_total)
        handle = await self._start(
            agent_spec,
            prompt,
            history,
            recorder,
            budget,
            provider=run.provider,
            run_id=run.run_id,
        )
        # The child is starting; its first model turn waits until the session exists.
        activation: Activation | None = None
        try:
            summary = await store.create_agent(
                definition,
                provider=PROVIDER,
                label=label or run.description,
                workspace=ws,
                parent_run=parent_run,
                spawn=stored_settings(agent_spec, self._sup.config),
            )
            got = await store.acquire(summary.id)
            assert isinstance(got, Activation), got  # a session nobody else knows of yet
            activation = got
            await recorder.bind(
                activation, [], [*history, ChatMessage(role="user", content=prompt)]
            )
        except BaseException:
            recorder.fail("it could not be created")
            handle.abort()
            if activation is not None:
                with anyio.CancelScope(shield=True):
                    await self._release(activation, "failed")
            raise
        if handle.trace is not None:
            handle.trace.agent(summary.id)
            self._traces[summary.id] = handle.trace
        return self._tended(summary, activation, handle, recorder, agent_spec)

    def _tended(
        self,
        summary: AgentSummary,
        activation: Activation,
        handle: RunHandle,
        recorder: Recorder,
        agent_spec: AgentSpec,
    ) -> AgentHandle:
        """A new agent's entry, its first child tended and its first answer awaited."""
        entry = _Agent(summary.id, activation=activation, handle=handle, recorder=recorder)
        entry.slot.acquire_nowait()
        self._agents[entry.id] = entry
        self._specs[entry.id] = agent_spec
        out = AgentHandle(entry.id, handle, summary.label)
        self._tend(entry, handle)
        assert self._tg is not None
        self._tg.start_soon(self._first_answer, entry, handle, out)
        return out

    async def _first_answer(self, agent: _Agent, handle: RunHandle, out: AgentHandle) -> None:
        result: RunResult | None = None
        try:
            result = await handle.result()
            result = await self._settle(agent, result)
        finally:
            agent.slot.release()
            if result is not None:
                out._set(result)

    # --- send ---------------------------------------------------------------------------------

    async def send(
        self,
        agent_id: str,
        message: str,
        *,
        wait: float = 0.0,
        model: ModelSpec = None,
        on_event: EventCallback | None = None,
        budgets: Sequence[Budget] = (),
        run_id: str | None = None,
        on_start: Callable[[RunHandle], None] | None = None,
    ) -> RunResult:
        """Continue an agent with `message`: warm in its live child here, else cold in a fresh
        one. Messages to one agent in this process are served one after another; `wait`: how
        long to wait for another process to let the agent go. `model`: for a cold resume, the
        model to use (else the one it ran with, as far as it is known here or stored).
        `budgets`: token budgets this activation draws from besides the agent's own (a
        delegation tree's); `run_id`: the id of the child a cold resume starts; `on_start`:
        told the run that serves the message (warm: the live one) before it is sent.

        The result, stored before it is returned; never raises for what the child does. Raises
        `BadAgentId` (not an id), `AgentUnavailable` (unknown or closed), `AgentBusy` (active in
        another process), `CannotResume` (no model or workspace to start it with), `ValueError`
        for bad usage."""
        agent_id = parse_agent_id(agent_id)
        if not isinstance(message, str) or not message.strip():
            raise ValueError("the message is empty")
        store = await self.store()
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = _Agent(agent_id)
        agent.users += 1
        try:
            async with agent.slot:
                return await self._send(
                    store, agent, message, wait, model, on_event, tuple(budgets), run_id, on_start
                )
        finally:
            agent.users -= 1
            self._forget_if_idle(agent)

    async def _send(
        self,
        store: SessionStore,
        agent: _Agent,
        message: str,
        wait: float,
        model: ModelSpec,
        on_event: EventCallback | None,
        budgets: tuple[Budget, ...],
        run_id: str | None,
        on_start: Callable[[RunHandle], None] | None,
    ) -> RunResult:
        summary = await store.get(agent.id)
        if summary is None or summary.status == "closed":
            gone = Unavailable(
                agent_id=agent.id, reason="closed" if summary is not None else "unknown_agent"
            )
            raise AgentUnavailable(gone.message)
        spec = self._specs.get(agent.id)
        total = spec.token_total if spec is not None else None
        if spec is None:
            stored = await store.spawn_settings(agent.id)
            total = stored.token_total if stored is not None else None
        used = summary.usage.input_tokens + summary.usage.output_tokens
        if total is not None and used >= total:
            return _budget_spent(agent.id, used, total)
        user = ChatMessage(role="user", content=message)
        handle, activation = agent.handle, agent.activation
        user_stored = False
        if handle is not None and handle.alive and activation is not None:
            assert agent.recorder is not None
            definition = spec.definition if spec is not None else None
            cap = activation_budget(definition, total, used) if definition is not None else None
            try:
                await agent.recorder.running(user)
            except LeaseLost as exc:
                raise AgentBusy(f"agent {agent.id} could not be continued here: {exc}") from None
            user_stored = True
            if on_start is not None:
                on_start(handle)
            result = await handle.message(message, token_budget=cap, budgets=budgets)
            if result is not None:
                return await self._settle(agent, result)
            # The child went (its keep-alive passed, it died) before it took the message.
        return await self._cold(
            store,
            agent,
            summary,
            message,
            user_stored,
            wait,
            model,
            on_event,
            used,
            budgets,
            run_id,
            on_start,
        )

    async def _cold(
        self,
        store: SessionStore,
        agent: _Agent,
        summary: AgentSummary,
        message: str,
        user_stored: bool,
        wait: float,
        model: ModelSpec,
        on_event: EventCallback | None,
        used: int,
        budgets: tuple[Budget, ...],
        run_id: str | None,
        on_start: Callable[[RunHandle], None] | None,
    ) -> RunResult:
        spec = await self._spec(store, agent.id, model)
        if not Path(spec.workspace).is_dir():
            raise CannotResume(f"agent {agent.id}'s workspace {spec.workspace!r} is gone")
        activation, fresh = agent.activation, False
        if activation is None or activation.released or activation.lost.is_set():
            got = await store.acquire(agent.id, wait=wait)
            if isinstance(got, Busy):
                raise AgentBusy(got.message)
            if isinstance(got, Unavailable):
                raise AgentUnavailable(got.message)
            activation, fresh = got, True
            agent.activation, agent.recorder = activation, None
        try:
            recorder = agent.recorder
            user = [] if user_stored else [ChatMessage(role="user", content=message)]
            if recorder is None:
                recorder = Recorder()
                transcript = await store.transcript(agent.id)
                closing = closing_results(transcript, None)
                await recorder.bind(activation, transcript, [*closing, *user])
            elif user:
                await recorder.running(user[0])
            handle = await self._start(
                spec,
                message,
                recorder.stored[:-1],
                recorder,
                activation_budget(spec.definition, spec.token_total, used),
                on_event=on_event,
                budgets=budgets,
                run_id=run_id,
                agent_id=agent.id,
            )
        except BaseException:
            if fresh:
                agent.activation = agent.recorder = None
                before = summary.status if summary.status != "running" else None
                with anyio.CancelScope(shield=True):
                    await self._release(activation, before)
            raise
        agent.handle, agent.recorder = handle, recorder
        if on_start is not None:
            on_start(handle)
        self._specs[agent.id] = spec
        self._tend(agent, handle)
        try:
            result = await handle.result()
        except anyio.get_cancelled_exc_class():
            handle.abort()  # the caller gave up: the child goes (the session reads interrupted)
            raise
        return await self._settle(agent, result)

    async def _spec(self, store: SessionStore, agent_id: str, model: ModelSpec) -> AgentSpec:
        known = self._specs.get(agent_id)
        if known is not None:
            return known if model is None else known.with_model(model)
        detail = await store.show(agent_id, tail=0)
        if detail is None:
            raise AgentUnavailable(Unavailable(agent_id=agent_id, reason="unknown_agent").message)
        got = spec_from_stored(
            detail.definition,
            detail.summary.workspace,
            await store.spawn_settings(agent_id),
            model,
        )
        if isinstance(got, str):
            raise CannotResume(f"agent {agent_id} {got}")
        return dataclasses.replace(got, run=self.guard(got.run))

    async def _start(
        self,
        spec: AgentSpec,
        prompt: str,
        history: Sequence[ChatMessage],
        recorder: Recorder,
        cap: int | None,
        *,
        on_event: EventCallback | None = None,
        budgets: Sequence[Budget] = (),
        provider: str | Provider | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> RunHandle:
        """`agent_id`: a cold resume's agent (its trace, when it has one here, is appended to)."""
        if self._shutting:
            raise RuntimeError("the supervisor is closing: no new child for an agent")
        definition = spec.definition
        if cap != definition.token_budget:
            definition = msgspec.structs.replace(definition, token_budget=cap)
        run = spec.run
        if agent_id is not None:
            run = run.replace(labels={**run.labels, "agentId": agent_id})
            traced = self._traces.get(agent_id)
            if traced is not None:
                run = run.replace(trace=traced.spec.replace(file=traced.path))
        return await self._sup.start(
            run.replace(
                prompt=prompt,
                agent=definition,
                on_event=on_event or run.on_event,
                history=tuple(history),
                on_turn=recorder.on_turn,
                continuation=Continuation(spec.keep_alive, on_report=recorder.on_report),
                budgets=(*run.budgets, *budgets),
                provider=provider if provider is not None else run.provider,
                run_id=run_id,
            )
        )

    # --- the end of an activation, and of a child ---------------------------------------------

    async def _settle(self, agent: _Agent, result: RunResult) -> RunResult:
        """Store how the activation ended, before its result is handed back."""
        recorder, activation = agent.recorder, agent.activation
        if recorder is None or activation is None:
            return self._noted(agent.id, result)
        with anyio.CancelScope(shield=True):
            try:
                await recorder.settle(result)
            except SessionError as exc:
                log.warning("agent %s: the answer was not stored: %s", agent.id, exc)
                result = _note(result, f"the agent's session could not record this answer: {exc}")
        result = self._noted(agent.id, result)
        spec = self._specs.get(agent.id)
        if spec is not None:
            result = recheck(spec.workspace, result)  # delivered now: as the files are now
        return result

    def _noted(self, agent_id: str, result: RunResult) -> RunResult:
        """`result` with what the store failed to do for the agent since its last result."""
        for message in self._troubles.pop(agent_id, {}).values():
            result = _note(result, f"the session store: {message}")
        return result

    def _tend(self, agent: _Agent, handle: RunHandle) -> None:
        if self._tg is None:
            handle.abort()
            raise RuntimeError("the supervisor is closing")
        self._tending += 1
        self._runs[handle.run_id] = agent.id
        agent.tended = anyio.Event()
        self._tg.start_soon(self._hold_lease, agent, handle, agent.activation)

    async def _hold_lease(
        self, agent: _Agent, handle: RunHandle, activation: Activation | None
    ) -> None:
        """While the child lives its lease is held; a lost lease cuts the child at once; once
        the child is gone the lease is released (unless a cold resume here took it on)."""
        try:
            async with anyio.create_task_group() as tg:
                if activation is not None:
                    tg.start_soon(_cut_when_lost, activation, handle)
                await handle.wait()
                tg.cancel_scope.cancel()
            async with agent.slot:
                if agent.handle is handle:
                    agent.handle = None
                    if activation is not None and agent.activation is activation:
                        agent.activation = agent.recorder = None
                        await self._release(activation)
        finally:
            self._runs.pop(handle.run_id, None)
            if agent.handle is None:
                agent.tended.set()
            self._forget_if_idle(agent)
            self._tending -= 1
            self._quiet.set()
            self._quiet = anyio.Event()

    async def _release(self, activation: Activation, status: AgentStatus | None = None) -> None:
        """Release a lease; if the store cannot, its heartbeat has stopped and it goes stale
        (`_trouble` tells whoever listens)."""
        try:
            await activation.release(status)
        except SessionError as exc:
            self._trouble(
                activation.agent_id, f"its lease could not be released (it goes stale): {exc}"
            )

    async def stop(self, agent_id: str, reason: str = "stopped") -> RunResult | None:
        """Stop the agent's child in this process now: the activation in progress (if any) is
        asked to abort and cut after the grace, and the child is taken down
        (`RunHandle.cancel`); its lease is released and the session stays (the next message
        resumes it cold). The stopped activation's result with the stop's receipt (`stop`),
        or one saying the agent was stopped between activations; `None` when its child does
        not live here."""
        agent = self._agents.get(parse_agent_id(agent_id))
        handle = agent.handle if agent is not None else None
        if agent is None or handle is None or handle.gone:
            return None
        result = await handle.cancel(reason)
        await agent.tended.wait()
        return result

    async def dispose(self, agent_id: str) -> None:
        """Let the agent's warm child go now (through the ladder) and release its lease; the
        session stays."""
        agent = self._agents.get(parse_agent_id(agent_id))
        if agent is None or agent.handle is None:
            return
        agent.handle.close()
        await agent.tended.wait()

    def _forget_if_idle(self, agent: _Agent) -> None:
        if (
            agent.users == 0
            and agent.handle is None
            and agent.activation is None
            and self._agents.get(agent.id) is agent
            and agent.slot.value == 1
        ):
            del self._agents[agent.id]


def agents_of(sup: SupervisorCore) -> Agents:
    """The continuable agents of a supervisor that keeps them (`tether.parent.Supervisor`);
    `ValueError` for one that does not (a bare `SupervisorCore`)."""
    agents = getattr(sup, "agents", None) if hasattr(type(sup), "agents") else None
    if not isinstance(agents, Agents):
        raise ValueError(
            "continuable sub-agents need a supervisor that keeps agents (tether.parent.Supervisor)"
        )
    return agents


async def _cut_when_lost(activation: Activation, handle: RunHandle) -> None:
    await activation.lost.wait()
    log.warning("agent %s: its lease was lost; disposing of its child", activation.agent_id)
    handle.abort()


def _note(result: RunResult, note: str) -> RunResult:
    message = f"{result.message}; {note}" if result.message else note
    return msgspec.structs.replace(result, message=message)


def _budget_spent(agent_id: str, used: int, total: int) -> RunResult:
    return RunResult(
        success=False,
        status="error",
        message=f"agent {agent_id} has used {used} tokens of its total budget of {total}; it "
        "cannot continue",
        failure=Failure(kind="budget_exhausted", limit=f"token_total={total}"),
    )


def _check_agent_run(run: RunSpec) -> None:
    """What a continuable agent's run cannot be: raises `ValueError`."""
    if isinstance(run.agent, str) and ":" in run.agent:
        raise ValueError("a continuable agent is a role name or an AgentDefinition")
    if run.continuation is not None:
        raise ValueError("a continuable agent's continuation is its keep_alive")
    if run.workspace_mode != "shared" or run.layer is not None or run.attempts != 1:
        raise ValueError(
            "a continuable agent works in its workspace: its session outlives any one child, "
            "and a layer (or an attempt's) would not be there for a cold resume; run it "
            "with Supervisor.run(..., workspace_mode='layered') instead"
        )


def _template(run: RunSpec, definition: AgentDefinition) -> RunSpec:
    """The run every child of the agent starts from (its prompt and history are each
    activation's own)."""
    return run.replace(
        prompt="",
        agent=definition,
        workspace=str(Path(run.workspace).resolve()),
        limits=run.limits or Limits(),
        history=(),
        provider=None if run.provider == "fork" else run.provider,
        run_id=None,
    )
