"""One run's life: take a child (cold or from the pool), shake hands, drive `agent/run` under the
run's clocks, and build its result — never raising for anything the child did. A continuable
run keeps its child between answers, for follow-up messages, until its keep-alive passes.

Theory of operation
-------------------
A `RunHandle` is created by `Supervisor.start()` from the run's plan (`plan.py`: bad usage
raised before anything is spawned, the run's models resolved), and it runs in a task of the
supervisor's group (`execute`); what it needs of the supervisor is the narrow `RunHost`. The
plan's transport obtains the child (`transport/`: a local process, spawned or taken ready
from the warm pool, or tether's runtime in memory); the run binds a `Broker` to it (what the
child may ask: models, approvals; its events relayed) and drives it, the same way whatever
carries it. Leaving the transport's context takes the child down on every path; the run's
result is then built from the answer, what was observed, and what the broker counted
(`results.build_result`).

Three clocks can end a run early, each recorded before the child is taken down: the handshake
timeout, the wall deadline (`timeout`) and the idle watchdog (`unresponsive`, any message from
the child re-arms it; children send heartbeats while they think). The idle clock stands still
while the parent is still answering one of the child's requests (a slow model turn is not the
child's silence) and the answer re-arms it. `cancel()` asks the child to abort
(`agent/cancel`) and gives it a grace to answer `aborted` itself before cutting the run.
A child that answered gets the polite `shutdown` rung; one that was cut off (deadline, idle,
cancel, broken wire) starts at the EOF lifeline.

Continuable runs
----------------
With a `Continuation`, the run is started with `continuable: true` and its child is not
disposed when it answers. The run is then a sequence of *activations* in one child: the prompt
(`agent/run`), then each follow-up (`message()`, sent as `agent/message`). Each activation has
its own broker (its own turn and token budgets and usage count), its own wall and idle clocks,
and its own result, built as soon as the child answers (the child is still alive, so the
result has no dispose rung). Between activations the child's whole tree is held still —
frozen in its cgroup, or SIGSTOPped where the tier has no freezer (`hold_still`; the freeze
is asked for the moment the answer is read, `stop_soon`, while the child is still on a CPU) —
and its broker is closed (every request answered `RUN_IDLE`): the result is checked against a
tree that cannot change what was checked, no process the activation left behind runs on, and
no model turn is served outside an activation. The next follow-up lets it run again, once its
`agent/message` is written. Freezing rather than killing what the activation left keeps a
continuable agent's background processes (a server it started) for its next activation.

The run's task drives the prompt and then idles with the child (`_idle`); each follow-up is
driven by its caller, in the caller's own task (`message()` → `_follow_up`), with the same
steps, so a follow-up costs no hand-over between tasks. While a caller drives, nothing ends
the run under it; the keep-alive counts again from its end. After `keep_alive` seconds without
a follow-up, or on `close()`, or when the child dies or announced no `agentMessage` support,
the run's task lets the child go and it is disposed through the ladder; a follow-up that
arrives too late is answered `None`, so its caller can start a fresh child instead. An
activation the child did not answer (it crashed, a clock or budget cut it) ends the run too,
and its result is built by the run's task after the dispose, with what the dispose saw (its
caller waits for it). A continuable run may take a pooled child like any other run: it holds
it, through every activation, until it lets it go, and the pool's task (which owns the child's
context) disposes of it then. A child in memory has nothing to hold still: its broker, closed,
serves nothing between activations all the same.

A run whose network policy allows anything holds its egress proxy for its child's whole life
(`network.py`: how tether's own child is wired to it, what the result says of it); the proxy's
decisions go out as `NetEvent`s, and a byte limit it reaches ends the activation in progress
as `net_limit`.

`result()` is the first activation's result; `wait()` returns once the child is gone.

A result is owed whatever happens: what raises in the parent while it drives a run or builds
an activation's result (a bug, an `OSError` from the workspace) is logged with its traceback
and ends the activation as `parent_error` (`results.parent_error`), with what the broker
counted; the child is taken down all the same (leaving the transport's context does it), and
a continuable run takes no more follow-ups.

Stopping
--------
`cancel()` and `abort()` stop the run (`stop.py`): from that instant its brokers refuse every
request and abandon the model turns in flight, and everything on its `stops` line (an
orchestrator's sub-agent runs too) is taken down. `cancel()` first asks the child to abort and
cuts it after the grace; `abort()` cuts it at once; a continuable run's child goes either way
(its session, if it has one, stays). The result of the activation the stop ended is built after
the dispose, with the stop's receipt (`RunResult.stop`): everything gone, the rung, the
processes left, the turns and tokens after the stop.
A provider with its own way of running (a foreign agent over ACP, one a user writes; see
`tether.parent.providers`) hands the handle a `RunBody` in place of that tether child: the body
obtains and drives its child, filling the run's `Observed`, under the same outer and drive
scopes, so `abort()`, `cancel()` (through the body), budgets and the result work the same way.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import msgspec

from tether.parent.process.classify import Observed
from tether.parent.process.config import ChildConfig
from tether.parent.process.isolation import probe_host
from tether.parent.process.launchers import launcher_name
from tether.parent.process.limits import Limits
from tether.parent.process.private_network import Channel, PrivateNetwork
from tether.parent.process.proc import SpawnError
from tether.parent.process.supervised import SupervisedProcess
from tether.parent.process.wired import handshake
from tether.parent.run.broker import Broker, Brokered, RunModels
from tether.parent.run.budget import Budget
from tether.parent.run.events import Event, EventCallback, RunFinished, RunStarted
from tether.parent.run.layered import Layered
from tether.parent.run.network import RunNetwork
from tether.parent.run.plan import RunPlan
from tether.parent.run.provider import RunBody
from tether.parent.run.results import build_result, parent_error
from tether.parent.run.sensitive import Watch, changes, take
from tether.parent.run.stop import StopLine
from tether.parent.run.tracing import run_trace
from tether.parent.run.transport import ChildLink, ChildRequest, ObtainedChild, ProcessHost
from tether.parent.trace.recorder import RunTrace
from tether.protocol import ConnectionClosed, LocalProtocolError, RemoteError, RemoteProtocolError
from tether.protocol.messages import (
    AgentEventParams,
    AgentMessageParams,
    AgentRunParams,
    Isolation,
    RunResult,
    StopReceipt,
)

if TYPE_CHECKING:
    from tether.parent.egress.events import NetEvent
    from tether.parent.egress.seat import EgressOptions, RunEgress
    from tether.parent.gateway import Gateway
    from tether.parent.process.layers import Layer

log = logging.getLogger("tether.parent")

IDLE = (
    "the run has answered: the parent serves it no model turn, approval or parent tool until "
    "its next message (a continuable run idles between activations)"
)
REPORT_CHARS = 16_000
"""The longest report text handed to a `ReportHook` (the child's `report` tool cuts there too)."""


class RunHost(ProcessHost, Protocol):
    """What a run needs of whoever owns it (a supervisor): what its transport uses (how
    children start, the warm pool, the keeper's registration), the event bus and the model
    gateway. Nothing else of the supervisor is the run's business."""

    def publish(self, event: Event, extra: EventCallback | None = None) -> None: ...

    async def gateway(self) -> Gateway: ...

    @property
    def egress_options(self) -> EgressOptions | None: ...
    def keep_layer(self, layer: Layer) -> None:
        """A layered run's layer is kept until it is applied or discarded."""

    def forget_layer(self, layer: Layer) -> None: ...


class _Activation:
    """The run's prompt, or one follow-up message, and the result it came to."""

    def __init__(self, message: str | None) -> None:
        self.message = message
        """`None` for the run's own prompt (`agent/run`)."""
        self.broker: Broker | None = None
        self.answer: RunResult | None = None
        self.result: RunResult | None = None
        """Set with `done`; stays `None` for a follow-up the child never took."""
        self.done = anyio.Event()
        self.drive: anyio.CancelScope | None = None
        self.started = time.monotonic()
        self.watch: Watch | None = None
        """The workspace's watched files (`sensitive.py`) before this activation began."""


RunState = Literal["starting", "running", "stopping", "done"]
"""Where a run is: `starting` (spawning its child, or the handshake), `running` (the child is
initialized and has the run, or idles between a continuable run's activations), `stopping` (the
child is being taken down), `done` (the result is ready and the child is gone)."""


class RunHandle:
    """One run in one child. Await `result()`; `cancel()` aborts it. A continuable run takes
    follow-ups with `message()` while its child lives; `close()` lets the child go."""

    def __init__(self, host: RunHost, plan: RunPlan) -> None:
        self.run_id = plan.run_id
        self._sup = host
        self._plan = plan
        self._params = plan.params
        self._config = plan.config
        self._limits = plan.limits
        self.host = plan.tier
        """The containment tier this run's child is under."""
        self.isolation = plan.isolation
        """The isolation level this run's child gets (and why it is weaker, if it is)."""
        self.provider = plan.provider
        """The name of the provider that carries the run."""
        self.labels: Mapping[str, str] = plan.labels
        """What the caller named the run (`RunSpec.labels`)."""
        self._on_event = plan.on_event
        self._models = plan.models
        self._approve = plan.approve
        self._parent_tools = plan.parent_tools
        self._on_turn = plan.on_turn
        self._continuation = plan.continuation
        self.trace: RunTrace | None = run_trace(plan)
        """The run's trace, when it has one (docs/traces.md)."""
        plan.models.bind(self.run_id, plan.params.workspace)
        self._first = self._activation(None, plan.params.agent.token_budget)
        self._latest = self._first
        self._current: _Activation | None = self._first
        """The activation the child is working on, if any."""
        self._driving: _Activation | None = None
        """The follow-up a caller of `message()` is driving (its own task drives it)."""
        self._taken = False
        """A caller took the idle child for a follow-up since the run's task last looked."""
        self._accepting = False
        """The child is idle between activations and takes a follow-up."""
        self._closing = False
        self._wake = anyio.Event()
        self._changed = anyio.Event()
        self._gone = anyio.Event()
        self._messages = anyio.Semaphore(1, fast_acquire=True)
        """One follow-up at a time (`fast_acquire`: no event-loop turn when none waits)."""
        self._child: ChildLink | None = None
        self._obtained: ObtainedChild | None = None
        self._body: RunBody | None = plan.body
        self._body_observed: Observed | None = None
        self._outer_scope = anyio.CancelScope()
        self._stopping = False
        self._layered = Layered(host, plan) if plan.layered else None
        """A layered run's layer, its change set and its apply policy (`layered.py`)."""
        self.pid: int | None = None
        """The child's process id, once it is spawned (`None` before, and when none was)."""
        self.launcher = launcher_name(plan.config.launcher)
        """The launcher the child's command runs under."""
        self.spawner: str | None = None
        """How its child was started (`zygote`, `exec`, or `memory`: no process), once it is."""
        self.spawner_fallback: str | None = None
        """Why the default spawner used exec rather than the zygote for tether's own child."""
        self._net = RunNetwork(
            self.run_id,
            plan.config,
            plan.isolation.level,
            on_event=self._net_event,
            on_limit=self._net_limit,
        )
        self.processes: list[SupervisedProcess] = []
        """Every process this run started (a stop's receipt counts what is left of them)."""
        self.halted: list[Broker] = []
        """The brokers a stop refused (a stop's receipt adds up what they counted)."""
        self.stops = StopLine()
        """What a stop of this run takes down with it: the run, and the runs added to it (an
        orchestrator's sub-agents)."""
        self.stops.add(self)

    # --- public -------------------------------------------------------------------------------

    @property
    def broker(self) -> Broker:
        """What the child asked of the parent in the latest activation, and what was counted."""
        assert self._latest.broker is not None
        return self._latest.broker

    @property
    def params(self) -> AgentRunParams:
        return self._params

    @property
    def egress(self) -> RunEgress | None:
        """The run's egress proxy, while its child lives, when its network policy allows
        anything (`network.py`)."""
        return self._net.egress

    @property
    def config(self) -> ChildConfig:
        return self._config

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def models(self) -> RunModels:
        """The models the parent resolved for the run (`main_name`: the model it bills)."""
        return self._models

    @property
    def plan(self) -> RunPlan:
        return self._plan

    def publish(self, event: Event) -> None:
        """Hand `event` to the run's own callback and the supervisor's subscribers."""
        self._sup.publish(event, self._on_event)

    async def gateway(self) -> Gateway:
        """The model gateway of the run's supervisor (for a foreign agent's model client)."""
        return await self._sup.gateway()

    def register(self, child: SupervisedProcess) -> None:
        """A process of this run is alive: the keeper and the exit hook know it from now on."""
        self.processes.append(child)
        self._sup.register(child)

    def unregister(self, child: SupervisedProcess) -> None:
        self._sup.unregister(child)

    async def result(self) -> RunResult:
        """The result of the run's prompt (a continuable run's first activation)."""
        await self._first.done.wait()
        assert self._first.result is not None
        return self._first.result

    @property
    def done(self) -> bool:
        return self._first.done.is_set()

    @property
    def continuable(self) -> bool:
        return self._continuation is not None

    @property
    def alive(self) -> bool:
        """The run's child lives and may still take a follow-up."""
        return self._continuation is not None and not self._gone.is_set() and not self._closing

    @property
    def gone(self) -> bool:
        """The run is over and its child is gone."""
        return self._gone.is_set()

    @property
    def state(self) -> RunState:
        """Where the run is now (read-only; see `RunState`)."""
        if self._gone.is_set():
            return "done"
        if self._stopping:
            return "stopping"
        child = self._child
        if child is None and self._body_observed is not None:
            return "running" if self.pid is not None else "starting"
        return "running" if child is not None and child.ready else "starting"

    async def ping(self) -> float | None:
        """Ask the run's child for a `ping`: the round trip in seconds, or `None` when no child
        can answer (not initialized yet, being taken down, gone, or it answered with an error).

        A wedged child does not answer at all: bound the call yourself
        (`with anyio.move_on_after(2): rtt = await handle.ping()`). An answered ping is the
        child speaking, so it re-arms the run's idle clock like any message from the child."""
        child = self._child
        if child is None or self.state != "running" or child.held is not None:
            return None
        started = time.perf_counter()
        try:
            await child.session.ping()
        except (ConnectionClosed, RemoteError, RemoteProtocolError, LocalProtocolError):
            return None
        return time.perf_counter() - started

    async def wait(self) -> None:
        """Wait until the run has ended and its child is gone (shielded callers use this)."""
        await self._gone.wait()

    async def message(
        self, text: str, *, token_budget: int | None = None, budgets: Sequence[Budget] = ()
    ) -> RunResult | None:
        """Continue a continuable run with a follow-up message (`agent/message`) in the same
        child, after the activation in progress if there is one. The follow-up's result, or
        `None` when the child is gone or going (keep-alive passed, it died, it was closed)
        before it took the message: start a fresh child then. `token_budget` caps this
        activation's tokens (default: the definition's); `budgets`: more budgets its turns draw
        from (a delegation tree's). Never raises for what the child does; a cancelled caller's
        activation is cut first."""
        if self._continuation is None:
            raise RuntimeError(f"run {self.run_id} is not continuable")
        async with self._messages:
            while not self._accepting and not self._gone.is_set() and not self._closing:
                await self._changed.wait()
            child = self._child
            if not self._accepting or child is None or child.endpoint.end is not None:
                return None
            act = self._activation(text, token_budget, budgets)
            # The caller's own task drives its follow-up: handing it to the run's task and the
            # result back cost two turns of the event loop on every follow-up's path. The run's
            # task keeps the child meanwhile, and takes it down if the activation ends the run.
            self._accepting = False
            self._driving = act
            self._taken = True
            try:
                keep = await self._follow_up(child, act)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    self._cut(act)
                    self._release(keep=False)
                    await act.done.wait()
                raise
            except Exception as exc:  # tether's own, in the caller's task: the result says so
                fault = _logged(self.run_id, exc)
                if not act.done.is_set():
                    with anyio.CancelScope(shield=True):
                        await self._resolve(act, child.observed, None, fault)
                keep = False
            self._release(keep)
            if not act.done.is_set():  # (`wait()` on a set event still yields a loop turn)
                await act.done.wait()  # resolved after the dispose: it ended the run unanswered
            return act.result

    async def cancel(self, reason: str = "cancelled by the parent") -> RunResult:
        """Stop the run (see the module docstring): ask the child to abort the activation in
        progress, cut it if it does not answer within the grace, and take it down. The
        activation's result, with the stop's receipt; for a continuable run stopped between
        activations, a result saying so, with the receipt. A run already over: its result."""
        if self._gone.is_set():
            return self._latest.result if self._latest.result is not None else await self.result()
        self.stops.ask(reason, spare=self)
        act = self._current or self._latest
        child = self._child
        if not act.done.is_set() and (child is not None or self._body is not None):
            with anyio.move_on_after(0.5), contextlib.suppress(ConnectionClosed):
                if self._body is not None:
                    await self._body.cancel(reason)
                elif child is not None:
                    await child.session.cancel(self.run_id, reason)
            with anyio.move_on_after(self._config.cancel_grace):
                await act.done.wait()
        if not act.done.is_set():
            if self._continuation is None:
                self.abort(reason)
            else:
                self._cut(act)
        await act.done.wait()
        result = act.result if act.result is not None else await self.result()
        if result.stop is None and self._continuation is not None:
            # Idle between activations: no activation to end; the child went all the same.
            await self.wait()
            receipt = await self.stops.receipt(gone=self)
            result = RunResult(
                success=False,
                status="aborted",
                message=f"stopped between activations ({reason}); the child is gone",
                run_id=self.run_id,
                stop=receipt,
            )
        return result

    def abort(self, reason: str = "aborted by the parent") -> None:
        """Stop the run now, with no grace (see the module docstring): the activation in
        progress ends `aborted` / `cancelled` and the child is disposed."""
        if self._gone.is_set():
            return
        self.stops.ask(reason, spare=self)
        self._closing = True
        self._pulse()
        act = self._current
        if act is not None and not act.done.is_set():
            self._cut(act)

    def close(self) -> None:
        """Let a continuable run's child go: once the activation in progress (if any) has
        answered, the child is disposed through the ladder."""
        self._closing = True
        self._pulse()

    def halt(self, why: str) -> None:
        """A stop of a line this run is on was asked: its brokers refuse every request from
        now (`Broker.stop`), and its child takes no more follow-ups."""
        for act in (self._first, self._latest, self._current, self._driving):
            broker = act.broker if act is not None else None
            if broker is not None and not any(b is broker for b in self.halted):
                broker.stop(why)
                self.halted.append(broker)
        self._closing = True
        self._pulse()

    # --- the run ------------------------------------------------------------------------------

    def _activation(
        self, message: str | None, token_budget: int | None, budgets: Sequence[Budget] = ()
    ) -> _Activation:
        act = _Activation(message)
        act.broker = Broker(
            self.run_id,
            self._models,
            self._approve,
            lambda ev: self._sup.publish(ev, self._on_event),
            max_turns=self._params.agent.max_iterations,
            token_budget=token_budget,
            # Each budget once: a follow-up may name one the run already draws from.
            budgets=tuple(dict.fromkeys((*self._plan.budgets, *budgets))),
            on_exhausted=lambda why: self._budget_exhausted(act, why),
            parent_tools=self._parent_tools,
            on_turn=self._on_turn,
            trace=self.trace,
        )
        return act

    def _pulse(self) -> None:
        self._wake.set()
        self._changed.set()
        self._changed = anyio.Event()

    def _cut(self, act: _Activation) -> None:
        """End one activation now: a follow-up not yet taken is withdrawn, one in progress is
        cut (the child is then disposed: it was interrupted mid-work)."""
        if act.done.is_set():
            return
        if self._child is not None:
            self._child.observed.cancelled = True
        elif self._body_observed is not None:
            self._body_observed.cancelled = True
        if act.drive is not None:
            act.drive.cancel()
        elif act is self._driving:
            # Its caller holds the tree still and builds the result: then the child goes.
            self._closing = True
        elif act is self._current:
            self._outer_scope.cancel()

    async def _resolve(
        self,
        act: _Activation,
        observed: Observed,
        stop: StopReceipt | None = None,
        fault: Exception | None = None,
    ) -> None:
        """The activation's result: built, for a layered run its change set measured and
        applied as its policy says (in threads, shielded), the stop's receipt attached, traced,
        then handed out. Owed whatever happens: a `fault` of the parent's (or one raised while
        building) makes it `parent_error`, and the child goes."""
        result: RunResult | None = None
        if fault is None:
            try:
                result = await self._settled(act, observed)
            except Exception as exc:
                fault = _logged(self.run_id, exc)
        if result is None:
            assert fault is not None
            self._closing = True  # a child whose result could not be built is not kept
            result = self._parent_error(act, observed, fault)
        if stop is not None:
            result = msgspec.structs.replace(result, stop=stop)
        act.result = result
        if self.trace is not None:
            try:
                # The result goes out with its trace on disk (bounded: `writer.FLUSH_SECONDS`).
                self.trace.result(result)
                with anyio.CancelScope(shield=True):
                    await self.trace.flush()
            except Exception:  # the result is owed all the same, traced or not
                log.exception("run %s: the trace could not take its result", self.run_id)
        act.done.set()
        self._sup.publish(RunFinished(self.run_id, result), self._on_event)

    async def _settled(self, act: _Activation, observed: Observed) -> RunResult:
        """The activation's result as built, and for a layered run settled against its layer."""
        result = self._build(act, observed)
        if self._layered is not None:
            with anyio.CancelScope(shield=True):
                claimed = act.answer.artifacts if act.answer is not None else []
                result = await self._layered.settle(
                    result, claimed, final=self._continuation is None or self._closing
                )
        return result

    def _parent_error(self, act: _Activation, observed: Observed, fault: Exception) -> RunResult:
        """What the parent knows of the activation whatever failed, ended as `parent_error`."""
        brokered = act.broker.brokered if act.broker is not None else Brokered()
        base = RunResult(
            success=False,
            status="error",
            run_id=self.run_id,
            containment=self._containment(),
            launcher=self.launcher,
            pid=self.pid,
            usage=brokered.usage,
            iteration_count=brokered.turns,
            duration_seconds=round(time.monotonic() - act.started, 3),
        )
        return parent_error(fault, base, rung=observed.rung)

    def _build(self, act: _Activation, observed: Observed) -> RunResult:
        prompts = 1
        if self._body is not None:
            prompts = self._body.prompts
        elif act is self._first and (self._child is None or not self._child.ready):
            prompts = 0
        assert act.broker is not None
        workspace = self._params.workspace
        seen = [] if act.watch is None else changes(act.watch, take(workspace), workspace)
        return build_result(
            self._params,
            containment=self._containment(),
            isolation=self._isolation_report(),
            observed=observed,
            answer=act.answer,
            brokered=act.broker.brokered,
            prompts=prompts,
            launcher=self.launcher,
            pid=self.pid,
            duration_seconds=time.monotonic() - act.started,
            trace=self.trace.report() if self.trace is not None else None,
            sensitive_changes=seen,
        )

    async def execute(self) -> None:
        trace = self.trace
        if trace is None:
            await self._execute()
            return
        # The trace's file lives as long as the run: its drain (which opens it) is a task of
        # the run's own, closed (bounded, shielded) after the last result.
        async with anyio.create_task_group() as tg:
            tg.start_soon(trace.drain)
            try:
                await self._execute()
            finally:
                with anyio.CancelScope(shield=True):
                    await trace.aclose()

    async def _execute(self) -> None:
        observed = Observed()
        fault: Exception | None = None
        try:
            # Before the child exists (or takes a pooled one): what it may change is measured.
            if self._layered is None:
                self._first.watch = take(self._params.workspace)
            with self._outer_scope:
                async with self._net.held(observed, self._sup.egress_options):
                    if observed.spawn_error is not None:
                        pass  # a credential went missing: nothing is spawned
                    elif self._layered is not None and not await self._layered.make(observed):
                        pass  # the layer could not be made: nothing is spawned
                    elif self._body is not None:
                        observed = await self._drive_body(self._body, observed)
                    else:
                        observed = await self._obtain_and_drive(observed)
        except Exception as exc:
            fault = _logged(self.run_id, exc)  # tether's own: the result says so
        finally:
            if self._child is not None:
                observed = self._child.observed  # also when the spawn phase was cut
            self._closing = True
            self._accepting = False
            if self._driving is not None:
                # The run's task was cut while a caller drove a follow-up: its child is gone,
                # so the caller gives the activation up at once; it is resolved here.
                with anyio.CancelScope(shield=True):
                    while self._driving is not None:
                        await self._changed.wait()
            pending = self._current
            if pending is not None and not pending.done.is_set():
                if self._outer_scope.cancelled_caught and not observed.spawn_error:
                    observed.cancelled = True
                receipt = None
                if self.stops.stopped:
                    receipt = await self.stops.receipt(gone=self)  # shielded
                await self._resolve(pending, observed, receipt, fault)
            if self._layered is not None:
                self._layered.close()
            self._gone.set()
            self._pulse()

    def _net_event(self, event: NetEvent) -> None:
        self._sup.publish(event, self._on_event)

    def _net_limit(self, what: str) -> None:
        """The egress proxy reached one of the run's network limits and cut everything: the
        activation in progress ends as `net_limit` (nothing changes once the child has
        answered)."""
        act = self._current
        observed = self._child.observed if self._child is not None else self._body_observed
        if act is None or observed is None or observed.answered:
            return
        observed.net_limit = what
        if act.drive is not None:
            act.drive.cancel()

    async def _drive_body(self, body: RunBody, observed: Observed) -> Observed:
        """A provider's own run (one activation: bodies are not continuable)."""
        self._body_observed = observed
        act = self._first
        with anyio.CancelScope() as drive:
            act.drive = drive
            act.answer = await body.drive(self, observed)
        act.drive = None
        assert act.broker is not None
        act.broker.close(IDLE)
        self._stopping = True
        return observed

    async def _obtain_and_drive(self, observed: Observed) -> Observed:
        # Everything up to obtaining the child is synchronous: a run cancelled before its task
        # got here must stop here, not start a child only to take it down again (no turn of
        # the event loop is needed to see it: the task has just been scheduled).
        await anyio.lowlevel.checkpoint_if_cancelled()
        cfg = self._config
        network: PrivateNetwork | None = None
        channel: Channel | None = None
        if self.egress is not None:
            cfg, network, channel = await self._net.wire(cfg)
        request = ChildRequest(
            cfg,
            self._limits,
            self.host,
            self.run_id.rsplit("-", 1)[-1],
            self._params.workspace,
            self.isolation.level,
            continuable=self._continuation is not None,
            layer=self._layered.overlay if self._layered is not None else None,
            workspace_read_only=self._plan.layer_read_only,
            network=network,
        )
        async with contextlib.AsyncExitStack() as stack:
            if channel is not None:
                stack.callback(channel.close)
            try:
                got = await stack.enter_async_context(self._plan.transport.open(request, self._sup))
            except SpawnError as exc:
                observed.spawn_error = str(exc)
                return observed
            child = got.child
            child.on_judged = self._judged
            self._obtained = got
            self._child = child
            if isinstance(child, SupervisedProcess):
                self.processes.append(child)  # what a stop's receipt counts
            self.pid = got.pid
            self.spawner = got.spawner
            self.spawner_fallback = got.fallback
            try:
                if channel is None or await self._net.attach(
                    channel, child, self._config.handshake_timeout
                ):
                    await self._serve(child)
            finally:
                self._stopping = True  # leaving the transport's context takes the child down
        self._note_spawn_failure(child)
        return child.observed

    def _note_spawn_failure(self, child: ChildLink) -> None:
        exec_error = child.spawn_failure()
        if exec_error and self._first.answer is None:
            child.observed.spawn_error = f"cannot start {self._config.command[0]!r}: {exec_error}"

    async def _judged(self) -> None:
        """The child's end is judged (`ChildLink.on_judged`): an activation it left unanswered
        is resolved now, before what the child held is released (its pipes, its cgroup, a
        sandbox's directories). A run cut from outside is resolved after, where the cut is
        known (`execute`), as is a stopped one (with the stop's receipt, which counts what is
        left once the child is gone) and a layered one (its layer measured once released)."""
        pending, child = self._current, self._child
        if pending is None or pending.done.is_set() or child is None:
            return
        if self._outer_scope.cancel_called or self.stops.stopped or self._layered is not None:
            return
        self._note_spawn_failure(child)
        await self._resolve(pending, child.observed)

    async def _serve(self, child: ChildLink) -> None:
        """Drive the prompt, then (continuable) each follow-up until the child is let go. An
        activation left unresolved here is resolved by `execute` after the dispose."""
        if self._continuation is None:
            await self._activations(child)
            return
        # One watch on the child's output for the whole run, not one per idle spell between
        # activations (a task started and cancelled on every follow-up's path).
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._wake_when_ended, child)
            try:
                await self._activations(child)
            finally:
                tg.cancel_scope.cancel()

    async def _activations(self, child: ChildLink) -> None:
        if not await self._activate(child, self._first):
            return
        while await self._idle(child):
            pass

    async def _follow_up(self, child: ChildLink, act: _Activation) -> bool:
        """One follow-up, in its caller's task: the child let go again, then the activation.
        Whether the child stays for another one (see `_activate`)."""
        self._current = self._latest = act  # its own from here: owed if anything below raises
        if self._layered is None:
            act.watch = take(self._params.workspace)  # the tree is still held still
        if self.trace is not None and act.message is not None:
            self.trace.follow_up(act.message)
        _fresh_activation(child.observed)
        # Let go once `agent/message` is written (`_converse`): the child leaves the freezer
        # to find it waiting, rather than waking twice; every other path resumes it too.
        return await self._activate(child, act)

    async def _activate(self, child: ChildLink, act: _Activation) -> bool:
        """Drive one activation; whether the child stays for another one. An activation left
        unresolved (the child did not answer) is resolved by `execute` after the dispose."""
        self._current = self._latest = act
        try:
            # A pooled child answered `initialize` before the run took it.
            handshake_first = act is self._first and not child.ready
            act.answer = await self._drive(child, act, handshake_first=handshake_first)
        finally:
            child.cut_off = not child.observed.answered
        if act.answer is None or self._continuation is None or self.stops.stopped:
            return False  # resolved after the dispose (a stopped run: with the receipt)
        # Between activations nothing of the child's tree runs, and nothing it asks is
        # served: its result is checked against a still tree, and no model turn is served
        # outside an activation (see the module docstring).
        await child.hold_still()
        await self._resolve(act, child.observed)
        self._current = None
        return not self._closing and self._keeps_runs(child)

    def _keeps_runs(self, child: ChildLink) -> bool:
        info = child.session.info
        return (
            child.endpoint.end is None
            and not child.exited()
            and info is not None
            and info.capabilities.agent_message
        )

    async def _idle(self, child: ChildLink) -> bool:
        """Between activations: until a caller takes the child for a follow-up and is done with
        it (`True`: the child idles again, unless that ended the run), or the keep-alive
        passes, the run is closed or the child dies (`False`: the child is then disposed)."""
        assert self._continuation is not None
        self._accepting = True
        self._pulse()
        with anyio.move_on_after(self._continuation.keep_alive):
            while not self._taken and not self._closing and child.endpoint.end is None:
                await self._wake.wait()
                self._wake = anyio.Event()
        if not self._taken:
            self._accepting = False
            self._closing = True  # the keep-alive passed, or the child died: it goes
            return False
        # A caller took the child for a follow-up (`message`): nothing ends the run under it,
        # and the keep-alive counts again from its end.
        while self._driving is not None:
            await self._wake.wait()
            self._wake = anyio.Event()
        self._taken = False
        return not self._closing

    def _release(self, keep: bool) -> None:
        """A follow-up's caller is done with the child: it idles again (`keep`), or the run's
        task takes it down."""
        if not keep:
            self._closing = True
        self._driving = None
        self._pulse()

    async def _wake_when_ended(self, child: ChildLink) -> None:
        await child.endpoint.ended.wait()
        self._wake.set()

    async def _drive(
        self, child: ChildLink, act: _Activation, *, handshake_first: bool
    ) -> RunResult | None:
        """Drive one activation under the wall clock (from here: a pooled child's clock starts
        when the run takes it)."""
        observed = child.observed
        assert act.broker is not None
        broker = act.broker
        child.serve_with(broker.on_request, self._notifications(broker))
        got = self._obtained
        if act is self._first and got is not None:
            self._sup.publish(
                RunStarted(
                    self.run_id, got.host_pid, got.argv, self.launcher, got.spawner, got.fallback
                ),
                self._on_event,
            )
        answer: RunResult | None = None
        wall = self._limits.wall_seconds
        with anyio.CancelScope() as drive:
            act.drive = drive
            with anyio.move_on_after(wall if wall is not None else math.inf) as clock:
                answer = await self._converse(child, act, handshake_first)
            if clock.cancelled_caught and wall is not None and answer is None:
                observed.deadline = wall
        act.drive = None
        return answer

    def _notifications(self, broker: Broker) -> Callable[[str, Any], Awaitable[None] | None]:
        hook = self._continuation.on_report if self._continuation is not None else None
        if hook is None:
            return broker.on_notification

        async def relay(method: str, params: Any) -> None:
            broker.on_notification(method, params)
            if (
                isinstance(params, AgentEventParams)
                and params.kind == "report"
                and params.run_id == self.run_id
            ):
                text = params.data.get("text")
                if isinstance(text, str) and text:
                    # Awaited here, so the reader takes the child's next message (its answer
                    # included) only once the report is stored.
                    await hook(text[:REPORT_CHARS])

        return relay

    async def _converse(
        self, child: ChildLink, act: _Activation, handshake_first: bool
    ) -> RunResult | None:
        observed = child.observed
        if handshake_first and not await handshake(child, self._config):
            return None
        what = "agent/run" if act.message is None else "agent/message"
        async with contextlib.AsyncExitStack() as stack:
            idle = self._limits.idle_seconds
            if idle is not None:
                # A task group only for the idle watchdog: one with no task in it still costs
                # a turn of the event loop when it is left, on every activation's path.
                tg = await stack.enter_async_context(anyio.create_task_group())
                tg.start_soon(self._watch_idle, child, act, idle, time.monotonic())
                stack.callback(tg.cancel_scope.cancel)
            try:
                # Once the child has answered, nothing it asks is served (no turn outside an
                # activation); closed in the reader, before the child's next message is read.
                closed = act.broker
                assert closed is not None

                def answered() -> None:
                    closed.close(IDLE)
                    if self._continuation is not None:
                        # It idles from here: its tree begins to freeze while the child is
                        # still on a CPU (`hold_still`, after the answer, finishes the hold).
                        child.stop_soon()

                if act.message is None:
                    answer = await child.session.run(self._params, on_answer=answered)
                else:
                    answer = await child.session.message(
                        AgentMessageParams(run_id=self.run_id, message=act.message),
                        on_answer=answered,
                        on_sent=child.resume,
                    )
            except ConnectionClosed:
                return None
            except RemoteError as exc:
                observed.answered = True
                verb = "run" if act.message is None else "message"
                observed.agent_error = f"the child refused the {verb}: {exc.message} ({exc.code})"
                return None
            except RemoteProtocolError as exc:
                observed.protocol_error = f"the child's answer to {what}: {exc.message}"
                return None
            except LocalProtocolError as exc:
                observed.protocol_error = f"the {what} request cannot be sent: {exc.message}"
                return None
        observed.answered = True
        return answer

    def exhaust(self, why: str) -> None:
        """End the activation in progress as `budget_exhausted` for a budget the caller keeps
        (a delegation tree's tokens, say), `why` as its message; nothing changes once the child
        has answered."""
        if self._current is not None:
            self._budget_exhausted(self._current, why)

    def _containment(self) -> str:
        got = self._obtained
        return self.host.tier if got is None or got.contained else "none"

    def _isolation_report(self) -> Isolation:
        choice = self.isolation
        abi = probe_host().landlock_abi if choice.level == "sandbox" else None
        return Isolation(
            level=choice.level,
            landlock_abi=abi,
            warning=choice.warning,
            network=self._net.report(),
        )

    def _budget_exhausted(self, act: _Activation, why: str) -> None:
        observed = self._child.observed if self._child is not None else self._body_observed
        if observed is not None and not observed.answered and act is self._current:
            observed.budget = why
            if act.drive is not None:
                act.drive.cancel()

    async def _watch_idle(
        self, child: ChildLink, act: _Activation, idle: float, since: float
    ) -> None:
        while True:
            # A pooled or idling child was quiet before this activation: count from its start.
            quiet = min(child.endpoint.quiet_for(), time.monotonic() - since)
            if quiet >= idle:
                child.observed.idle = idle
                if act.drive is not None:
                    act.drive.cancel()
                return
            await anyio.sleep(idle - quiet)


def _logged(run_id: str, exc: Exception) -> Exception:
    """`exc`, a failure of tether's own in a run, logged with its traceback."""
    log.error("run %s: tether itself failed (the run ends as parent_error)", run_id, exc_info=exc)
    return exc


def _fresh_activation(observed: Observed) -> None:
    """A follow-up starts with a clean slate of what ends an activation."""
    observed.answered = False
    observed.cancelled = False
    observed.deadline = None
    observed.idle = None
    observed.budget = None
    observed.net_limit = None
    observed.agent_error = None
