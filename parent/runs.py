"""One run's life: take a child (cold or from the pool), shake hands, drive `agent/run` under the
run's clocks, and build its result — never raising for anything the child did.

Theory of operation
-------------------
A `RunHandle` is created by `Supervisor.start()` once the request has been checked (bad usage
raises before anything is spawned) and the run's models are resolved, and it runs in a task of
the supervisor's group (`execute`). It spawns the child (`spawning.spawn_child`) or takes a
ready one from the warm pool, binds the run's `Broker` to it (what the child may ask: models,
approvals; its events relayed), and drives it. The child's context disposes of it on every
path; the run's result is then built from the answer, what was observed, and what the broker
counted (`results.build_result`).

Three clocks can end a run early, each recorded before the child is taken down: the handshake
timeout, the wall deadline (`timeout`) and the idle watchdog (`unresponsive`, any message from
the child re-arms it; children send heartbeats while they think). The idle clock stands still
while the parent is still answering one of the child's requests (a slow model turn is not the
child's silence) and the answer re-arms it. `cancel()` asks the child to abort
(`agent/cancel`) and gives it a grace to answer `aborted` itself before cutting the run.
A child that answered gets the polite `shutdown` rung; one that was cut off (deadline, idle,
cancel, broken wire) starts at the EOF lifeline.

A provider with its own way of running (a foreign agent over ACP, the in-process runtime; see
`tether.parent.providers`) hands the handle a `RunBody` in place of that tether child: the body
obtains and drives its child, filling the run's `Observed`, under the same outer and drive
scopes, so `abort()`, `cancel()` (through the body), budgets and the result work the same way.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import anyio

from tether.parent.broker import ApprovePolicy, Broker, ParentTool, RunModels, TurnHook
from tether.parent.classify import Observed
from tether.parent.config import ChildConfig, pool_key
from tether.parent.events import Event, RunFinished, RunStarted
from tether.parent.host import Host
from tether.parent.isolation import Choice, probe_host
from tether.parent.launchers import Local, resolve_launcher
from tether.parent.limits import Limits
from tether.parent.pool import Pooled
from tether.parent.process import SpawnError
from tether.parent.results import build_result
from tether.parent.spawning import child_env, handshake, missing_command, spawn_child
from tether.parent.supervised import SupervisedChild
from tether.protocol import ConnectionClosed, LocalProtocolError, RemoteError, RemoteProtocolError
from tether.protocol.messages import AgentRunParams, Isolation, RunResult

if TYPE_CHECKING:
    from tether.parent.supervisor import Supervisor

EventCallback = Callable[[Event], None]


class RunBody(Protocol):
    """A provider's way to obtain and drive a run's child, in place of a tether child."""

    prompts: int
    """User turns sent to the agent (the result's `turnCount`)."""

    async def drive(self, handle: RunHandle, observed: Observed) -> RunResult | None:
        """Run the child to its answer (`None`: no answer, `observed` says why), filling
        `observed` as things happen; never raises for what the child did."""
        ...

    async def cancel(self, reason: str) -> None:
        """Ask the agent to stop; the handle cuts the run if it has not ended within the
        config's cancel grace."""
        ...


class RunHandle:
    """One run in one child. Await `result()`; `cancel()` aborts it."""

    def __init__(
        self,
        sup: Supervisor,
        params: AgentRunParams,
        config: ChildConfig,
        limits: Limits,
        containment: Host,
        models: RunModels,
        approve: ApprovePolicy | None,
        on_event: EventCallback | None,
        parent_tools: Sequence[ParentTool] = (),
        on_turn: TurnHook | None = None,
        isolation: Choice | None = None,
        body: RunBody | None = None,
    ) -> None:
        self.run_id = params.run_id
        self._sup = sup
        self._params = params
        self._config = config
        self._limits = limits
        self.host = containment
        """The containment tier this run's child is under."""
        self.isolation = isolation or Choice("process")
        """The isolation level this run's child gets (and why it is weaker, if it is)."""
        self._on_event = on_event
        self._broker = Broker(
            params.run_id,
            models,
            approve,
            lambda ev: sup.publish(ev, on_event),
            max_turns=params.agent.max_iterations,
            token_budget=params.agent.token_budget,
            on_exhausted=self._budget_exhausted,
            parent_tools=parent_tools,
            on_turn=on_turn,
        )
        self._done = anyio.Event()
        self._result: RunResult | None = None
        self._child: SupervisedChild | None = None
        self._body = body
        self._body_observed: Observed | None = None
        self._drive_scope: anyio.CancelScope | None = None
        self._outer_scope = anyio.CancelScope()
        self.pid: int | None = None

    # --- public -------------------------------------------------------------------------------

    @property
    def broker(self) -> Broker:
        """What this run's child asked of the parent, and what the parent counted."""
        return self._broker

    @property
    def params(self) -> AgentRunParams:
        return self._params

    @property
    def config(self) -> ChildConfig:
        return self._config

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def supervisor(self) -> Supervisor:
        return self._sup

    def publish(self, event: Event) -> None:
        """Hand `event` to the run's own callback and the supervisor's subscribers."""
        self._sup.publish(event, self._on_event)

    async def result(self) -> RunResult:
        await self._done.wait()
        assert self._result is not None
        return self._result

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def wait(self) -> None:
        """Wait until the run has ended and its child is gone (shielded callers use this)."""
        await self._done.wait()

    async def cancel(self, reason: str = "cancelled by the parent") -> RunResult:
        """Abort the run: ask the child, then cut it if it does not answer within the grace."""
        child = self._child
        if not self._done.is_set() and (child is not None or self._body is not None):
            with anyio.move_on_after(0.5), contextlib.suppress(ConnectionClosed):
                if self._body is not None:
                    await self._body.cancel(reason)
                elif child is not None:
                    await child.session.cancel(self.run_id, reason)
            with anyio.move_on_after(self._config.cancel_grace):
                await self._done.wait()
        if not self._done.is_set():
            self.abort()
        return await self.result()

    def exhaust(self, why: str) -> None:
        """End the run as `budget_exhausted` for a budget the caller keeps (a delegation tree's
        tokens, say), `why` as its message; nothing changes once the child has answered."""
        self._budget_exhausted(why)

    def abort(self) -> None:
        """Cut the run now (no grace); the result is `aborted` / `cancelled`."""
        if self._done.is_set():
            return
        if self._child is not None:
            self._child.observed.cancelled = True
        elif self._body_observed is not None:
            self._body_observed.cancelled = True
        if self._drive_scope is not None:
            self._drive_scope.cancel()
        else:
            self._outer_scope.cancel()

    # --- the run ------------------------------------------------------------------------------

    async def execute(self) -> None:
        observed = Observed()
        answer: RunResult | None = None
        try:
            with self._outer_scope:
                if self._body is not None:
                    answer = await self._drive_body(self._body, observed)
                else:
                    answer, observed = await self._spawn_and_drive(observed)
        finally:
            if self._outer_scope.cancelled_caught and not observed.spawn_error:
                observed.cancelled = True
            self._result = build_result(
                self._params,
                containment=self.host.tier,
                isolation=self._isolation_report(),
                observed=observed,
                answer=answer,
                brokered=self._broker.brokered,
                prompts=self._body.prompts
                if self._body is not None
                else 1
                if self._child is not None and self._child.ready
                else 0,
            )
            self._done.set()
            self._sup.publish(RunFinished(self.run_id, self._result), self._on_event)

    async def _drive_body(self, body: RunBody, observed: Observed) -> RunResult | None:
        self._body_observed = observed
        answer: RunResult | None = None
        with anyio.CancelScope() as drive:
            self._drive_scope = drive
            answer = await body.drive(self, observed)
        self._drive_scope = None
        return answer

    async def _spawn_and_drive(self, observed: Observed) -> tuple[RunResult | None, Observed]:
        cfg = self._config
        # Everything up to the spawn is synchronous: a run cancelled before its task got here
        # must stop at this checkpoint, not start a child only to take it down again.
        await anyio.lowlevel.checkpoint()
        launcher = resolve_launcher(cfg.launcher)
        env = child_env(cfg)
        missing = None
        if launcher.program is not None:
            missing = missing_command([launcher.program], env, "the launcher")
        if missing is None and not launcher.provides.eof_teardown_only:
            missing = missing_command(cfg.command, env)
        if missing:
            observed.spawn_error = missing
            return None, observed
        pool = self._sup.pool
        if pool is not None and isinstance(launcher, Local):
            key = pool_key(
                cfg, self._limits, self.host, self.isolation.level, self._params.workspace
            )
            pooled = pool.acquire(key, env)
            if pooled is not None:
                return await self._drive_pooled(pooled)
        try:
            spawner = await self._sup.spawner(cfg)
            child = spawn_child(
                cfg,
                self._limits,
                self.host,
                self.run_id.rsplit("-", 1)[-1],
                launcher=launcher,
                workspace=self._params.workspace,
                spawner=spawner,
                level=self.isolation.level,
            )
        except SpawnError as exc:
            observed.spawn_error = str(exc)
            return None, observed
        self._child = child
        self.pid = child.pid
        answer: RunResult | None = None
        self._sup.register(child)
        try:
            async with child:
                try:
                    answer = await self._drive(child, handshake_first=True)
                finally:
                    child.cut_off = not child.observed.answered
        finally:
            self._sup.unregister(child)
        exec_error = child.spawn_failure()
        if exec_error and answer is None:
            child.observed.spawn_error = f"cannot start {cfg.command[0]!r}: {exec_error}"
        return answer, child.observed

    async def _drive_pooled(self, pooled: Pooled) -> tuple[RunResult | None, Observed]:
        """A run in a child the pool started and initialized: the pool's task owns the child's
        context (and so its dispose); this run drives it and then hands it back to be disposed."""
        child = pooled.child
        child.observed.limits = self._limits
        self._child = child
        self.pid = child.pid
        answer: RunResult | None = None
        try:
            answer = await self._drive(child, handshake_first=False)
        finally:
            child.cut_off = not child.observed.answered
            with anyio.CancelScope(shield=True):
                await pooled.finish()
        return answer, child.observed

    async def _drive(self, child: SupervisedChild, *, handshake_first: bool) -> RunResult | None:
        """Drive one run under the wall clock (from here: a pooled child's clock starts when
        the run takes it)."""
        observed = child.observed
        child.serve_with(self._broker.on_request, self._broker.on_notification)
        self._sup.publish(
            RunStarted(self.run_id, child.pid, tuple(self._config.command)), self._on_event
        )
        answer: RunResult | None = None
        wall = self._limits.wall_seconds
        with anyio.CancelScope() as drive:
            self._drive_scope = drive
            with anyio.move_on_after(wall if wall is not None else math.inf) as clock:
                answer = await self._converse(child, handshake_first)
            if clock.cancelled_caught and wall is not None and answer is None:
                observed.deadline = wall
        self._drive_scope = None
        return answer

    async def _converse(self, child: SupervisedChild, handshake_first: bool) -> RunResult | None:
        observed = child.observed
        if handshake_first and not await handshake(child, self._config):
            return None
        async with anyio.create_task_group() as tg:
            idle = self._limits.idle_seconds
            if idle is not None:
                tg.start_soon(self._watch_idle, child, idle, time.monotonic())
            try:
                answer = await child.session.run(self._params)
            except ConnectionClosed:
                return None
            except RemoteError as exc:
                observed.answered = True
                observed.agent_error = f"the child refused the run: {exc.message} ({exc.code})"
                return None
            except RemoteProtocolError as exc:
                observed.protocol_error = f"the child's answer to agent/run: {exc.message}"
                return None
            except LocalProtocolError as exc:
                observed.protocol_error = f"the run's request cannot be sent: {exc.message}"
                return None
            finally:
                tg.cancel_scope.cancel()
        observed.answered = True
        return answer

    def _isolation_report(self) -> Isolation:
        choice = self.isolation
        abi = probe_host().landlock_abi if choice.level == "sandbox" else None
        return Isolation(level=choice.level, landlock_abi=abi, warning=choice.warning)

    def _budget_exhausted(self, why: str) -> None:
        observed = self._child.observed if self._child is not None else self._body_observed
        if observed is not None and not observed.answered:
            observed.budget = why
            if self._drive_scope is not None:
                self._drive_scope.cancel()

    async def _watch_idle(self, child: SupervisedChild, idle: float, since: float) -> None:
        while True:
            # A pooled child was quiet in the pool before this run: count from the run's start.
            quiet = min(child.endpoint.quiet_for(), time.monotonic() - since)
            if quiet >= idle:
                child.observed.idle = idle
                if self._drive_scope is not None:
                    self._drive_scope.cancel()
                return
            await anyio.sleep(idle - quiet)
