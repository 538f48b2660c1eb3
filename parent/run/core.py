"""The supervisor's core: owns children, runs their runs, and always takes them down again.

Theory of operation
-------------------
A `SupervisorCore` (`tether.parent.Supervisor` is one, with continuable agents and
orchestration added) is an async context manager that owns a task group, the event bus
(`events.EventBus`), and, when used, a keeper process, a zygote and a warm pool. `start()`
plans the request (`plan.py`: bad usage raises `ValueError` before anything is spawned; the
run's models and its transport are chosen there) and runs the whole life of one run in a task
of that group (`handle.RunHandle`), which resolves to a `RunResult` and never raises for
anything the child did. The run obtains its child through a transport (`transport/`): a local
process, or tether's child runtime in memory. Every child process is registered while it
lives: with the keeper, so a SIGKILLed supervisor's trees still die (`process/keeper.py`), and
with the exit hook, which SIGKILLs any child still registered. The keeper is started with the
first child process, so a supervisor whose children all run in memory starts no process. If
the caller of `run()` is cancelled, the child is disposed (shielded) before the cancellation
propagates. Leaving the supervisor aborts every run still going and waits until each child is
gone.

The parts: `spec` (a run request's one shape) and `plan` (the one planning step, where bad
usage is found), `handle` (one run's clocks and drive), `broker` (what a child may ask) and
`budget` (reservations), `results` (the result); below them `process/`: spawning, the host's
containment, the supervised child and its dispose ladder, the pool, the zygote, the keeper.

Providers: every run is carried out by a named provider of `sup.providers` (`spawn` by
default; `fork`, `command`, `inprocess`, `acp`, and any a user registers), which prepares the
run's request before anything is spawned and may drive the run its own way
(`tether.parent.providers`). Foreign agents reach their model through the supervisor's model
gateway, started on first use (`gateway()`) and closed when the supervisor closes.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import weakref
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from anyio.abc import TaskGroup

from tether.contain.privileges import set_dumpable
from tether.parent.models.http_pool import pooled
from tether.parent.process.cgroups import sweep_stale_once
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig, PoolSpec, pool_key
from tether.parent.process.env import build_child_env
from tether.parent.process.host import host
from tether.parent.process.isolation import Choice, choose_level, probe_host
from tether.parent.process.keeper import Keeper
from tether.parent.process.launchers import Local, Pidns, resolve_launcher
from tether.parent.process.layers import Layer
from tether.parent.process.limits import Limits, raise_open_files_limit
from tether.parent.process.pool import WarmPool
from tether.parent.process.proc import SpawnError
from tether.parent.process.spawn import (
    AutoSpawner,
    Spawner,
    check_spawner,
    child_env,
    missing_command,
    spawn_child,
    wants_zygote,
)
from tether.parent.process.supervised import SupervisedChild, SupervisedProcess
from tether.parent.process.wired import handshake
from tether.parent.process.zygote import Zygote, ZygoteSpawner
from tether.parent.providers.builtin import builtin_providers
from tether.parent.providers.gateway_seat import GatewaySeat
from tether.parent.run import apply as applying
from tether.parent.run.attempts import run_attempts
from tether.parent.run.events import EventBus
from tether.parent.run.handle import RunHandle
from tether.parent.run.plan import PlanContext, plan
from tether.parent.run.spec import RunSpec, spec_of
from tether.parent.run.transport import PROCESS, builtin_transports
from tether.parent.trace.spec import TraceOption, trace_spec
from tether.protocol.messages import ApplyOutcome, ApplyPolicy, ChangeSet, RunResult

if TYPE_CHECKING:
    from tether.parent.egress.seat import EgressOptions
    from tether.parent.gateway import Gateway


class SupervisorCore(EventBus):
    """Owns children and their teardown: runs, their children, the event bus and the model
    gateway. `tether.parent.Supervisor` is this plus continuable agents and orchestration;
    use it as `async with Supervisor() as sup:`."""

    def __init__(
        self,
        config: ChildConfig | None = None,
        *,
        pool: PoolSpec | None = None,
        trace: TraceOption = None,
        egress: EgressOptions | None = None,
    ) -> None:
        """`config`: how children are started and taken down unless a run says otherwise
        (`ChildConfig(transport="memory")`: every child of tether's own runtime runs in
        memory); `pool`: keep initialized children ready (`PoolSpec`); `trace`: trace every
        run that names no trace of its own (a directory or a `TraceSpec`, docs/traces.md);
        `egress`: how the egress proxies of runs with a network policy resolve names and
        verify servers (default: the host's resolver and trusted CAs; see
        `tether.parent.egress.seat`)."""
        super().__init__()
        self.config = config or ChildConfig()
        self._egress = egress
        self.trace = trace_spec(trace)
        """Where runs are traced unless they say otherwise (`None`: they are not)."""
        self._pool: WarmPool | None = None
        self._tg: TaskGroup | None = None
        self._live: dict[int, SupervisedProcess] = {}
        self._handles: set[RunHandle] = set()
        self._keeper: Keeper | None = None
        self._keeper_tried = False
        self._zygote: Zygote | None = None
        self._zygote_lock = anyio.Lock(fast_acquire=True)  # every zygote spawn takes it
        self._zygote_fork = ZygoteSpawner(lambda: self._zygote, skip=len(DEFAULT_COMMAND))
        self._zygote_failed: str | None = None
        """Why the zygote could not start (`spawner="auto"` then uses exec)."""
        self._contained: Zygote | None = None
        """The zygote in a PID namespace of its own, for children under the `pidns` launcher
        (a placed run's node host's): started on first use, like the other."""
        self._contained_fork = ZygoteSpawner(
            lambda: self._contained, skip=len(DEFAULT_COMMAND), contains="pidns"
        )
        self._contained_failed: str | None = None
        self._launched: dict[bool, Zygote] = {}
        """Zygotes launched ahead by a run's plan (`_head_start`), by `contained`, until a
        spawn waits for them to be ready (`_zygote_ready`) or the supervisor closes."""
        self._warned = False
        self.providers = builtin_providers()
        """The ways this supervisor runs a sub-agent, by name (`start(provider=...)`); register
        your own here."""
        self.transports = builtin_transports()
        """How its runs obtain their children, by the name a `ChildConfig.transport` gives
        (`process`, `memory`); add your own here."""
        self._gateway = GatewaySeat()
        self.layers: dict[str, Layer] = {}
        """Layers of layered runs that still hold a change set not applied, by directory
        (`apply`, `discard`, `RunSpec.layer`)."""
        self.host = host()
        """What `containment="auto"` picks on this host; each run names its own tier
        (`RunHandle.host`, `RunResult.containment`)."""
        if pool is not None:
            cfg = pool.config or self.config
            if cfg.transport != PROCESS:
                raise ValueError("a pool holds local child processes only (transport='process')")
            if not isinstance(resolve_launcher(cfg.launcher), Local):
                raise ValueError("a pool holds local children only (launcher='local')")
            if not cfg.network_policy.none:
                raise ValueError(
                    "a pool's children have no network: a run with a network policy gets a "
                    "child and an egress proxy of its own (leave network out of the pool's "
                    "config)"
                )
            check_spawner(cfg)
            choice = choose_level(cfg.isolation)
            workspace = None
            if pool.workspace is not None:
                workspace = str(Path(pool.workspace).resolve())
            elif choice.level == "sandbox":
                raise ValueError(
                    "a sandboxed pool serves one workspace: pass PoolSpec(workspace=...), or "
                    "isolation='process' in the pool's config"
                )
            self._pool = self._make_pool(pool.size, cfg, pool.limits, choice, workspace)
            self._warn_once(choice)
        _registry.add(self)

    # --- the context ------------------------------------------------------------------------

    def _warn_once(self, choice: Choice) -> None:
        """Say on stderr, once per supervisor, that `auto` settled for less than a sandbox (a
        child in memory has its own warning, in its result, and asks the host nothing)."""
        if (
            choice.level == "process"
            and choice.warning
            and probe_host().why_not
            and not self._warned
        ):
            self._warned = True
            sys.stderr.write(f"tether: warning: {choice.warning}\n")
            sys.stderr.flush()

    async def __aenter__(self) -> Self:
        # Non-dumpable: no child (same user or not) may read this process's environment,
        # memory or descriptors through /proc, or ptrace it. Process-wide and kept.
        set_dumpable(False)
        # Each live child holds several of our descriptors: the soft limit goes up to the hard
        # one, once per process (children still start with the soft limit we were given).
        raise_open_files_limit()
        # What supervisors that were SIGKILLed left behind (their keeper may have died too).
        sweep_stale_once()
        # Models built from strings keep their connections alive while the supervisor is open.
        self._http = pooled()
        await self._http.__aenter__()
        self._tg = anyio.create_task_group()
        try:
            await self._tg.__aenter__()
        except BaseException:
            await self._http.__aexit__(None, None, None)
            raise
        if self._pool is not None:
            self._pool.start(self._tg)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        with anyio.CancelScope(shield=True):
            for handle in list(self._handles):
                handle.abort()
            for handle in list(self._handles):
                await handle.wait()
            if self._pool is not None:
                self._pool.close()  # idle children go down the ladder; the group waits for it
            await self._close_services()
            self._gateway.close()  # the gateway's task ends; the group waits for it
        # Every run is done, so the group has nothing left to wait for. An exception from the
        # body propagates as itself rather than wrapped in an ExceptionGroup.
        tg, self._tg = self._tg, None
        try:
            await tg.__aexit__(None, None, None)
        finally:
            launched = list(self._launched.values())
            self._launched.clear()
            for zygote in (self._zygote, self._contained, *launched):
                if zygote is not None:
                    with anyio.CancelScope(shield=True):
                        await self._close_zygote(zygote)
            self._zygote = self._contained = None
            keeper, self._keeper = self._keeper, None
            if keeper is not None:
                with anyio.CancelScope(shield=True):
                    await keeper.aclose()
            await self._http.__aexit__(None, None, None)
        return None

    async def _close_services(self) -> None:
        """What a subclass keeps beside the runs, closed once every run is done (the agents'
        leases and store, `tether.parent.Supervisor`)."""

    # --- runs -------------------------------------------------------------------------------

    async def start(self, spec: RunSpec | str | None = None, /, **fields: Any) -> RunHandle:
        """Start one run and return its handle: `start(RunSpec(...))`, or `start(prompt,
        **fields)` with the spec's fields as keywords (`agent=`, `workspace=`, `model=`,
        `limits=`, `provider=`, ...; see `RunSpec`). Raises `ValueError` for bad usage
        (unknown agent or provider, unreadable model script, bad limits, no model for the
        built-in agent loop), before spawning (`plan.py`); warns (`RuntimeWarning`) when the
        idle limit is too close to tether's heartbeat interval to let a slow tool call finish
        (`checks.py`)."""
        if self._tg is None:
            raise RuntimeError("use the Supervisor as `async with Supervisor() as sup:`")
        context = PlanContext(
            self.providers,
            self.config,
            transports=self.transports,
            trace=self.trace,
            layers=self.layers,
            ahead=self._head_start,
        )
        planned = await plan(spec_of(spec, fields), context)
        self._warn_once(planned.isolation)
        handle = RunHandle(self, planned)
        self._handles.add(handle)
        self._tg.start_soon(self._execute, handle)
        return handle

    async def _execute(self, handle: RunHandle) -> None:
        try:
            await handle.execute()
        finally:
            self._handles.discard(handle)

    async def run(self, spec: RunSpec | str | None = None, /, **fields: Any) -> RunResult:
        """Run one sub-agent to its end and return its `RunResult` (the arguments are
        `start`'s); never raises for anything the child does. If this call is cancelled, the
        child is disposed first.

        `attempts=N` (at most `MAX_ATTEMPTS`): N runs of the same task at once, each in a
        layer of its own (`workspace_mode` is then `layered`), each counted as a run of its
        own; the attempt taken is the one `choose(results)` names (default: the first to
        succeed), its change set applied as `apply` says, the others discarded. The result is
        the taken attempt's (or, when none is taken, a failure saying why), with every
        attempt's result in `attempts`."""
        whole = spec_of(spec, fields)
        if whole.attempts != 1:
            return await run_attempts(self, whole)
        handle = await self.start(whole)
        try:
            return await handle.result()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                handle.abort()
                await handle.wait()
            raise

    @property
    def egress_options(self) -> EgressOptions | None:
        """How the egress proxies of this supervisor's runs reach the world (`None`: the
        host's resolver and trusted CAs)."""
        return self._egress

    # --- layered runs' change sets ------------------------------------------------------------

    def keep_layer(self, layer: Layer) -> None:
        self.layers[layer.root] = layer

    def forget_layer(self, layer: Layer) -> None:
        self.layers.pop(layer.root, None)

    async def apply(
        self, result: RunResult | ChangeSet, *, policy: ApplyPolicy = "never"
    ) -> ApplyOutcome:
        """Apply a layered run's change set (`result.changes`, or a `ChangeSet`) to its
        workspace now: all or nothing, each file atomically, refused on conflict
        (`ApplyOutcome.conflicts`, both sides' content). An applied layer is discarded; one in
        conflict is kept. Never raises for what the workspace or the layer hold."""
        cs = result if isinstance(result, ChangeSet) else result.changes
        if cs is None:
            return ApplyOutcome(state="not_applied", message="the result has no change set")
        outcome = await anyio.to_thread.run_sync(lambda: applying.apply(cs, policy=policy))
        if outcome.state == "applied":
            layer = self.layers.pop(cs.layer, None)
            if layer is not None:
                layer.discard()
            else:
                await anyio.to_thread.run_sync(applying.discard, cs)
        return outcome

    async def discard(self, result: RunResult | ChangeSet) -> ApplyOutcome:
        """Throw a layered run's change set away (its layer's directory removed)."""
        cs = result if isinstance(result, ChangeSet) else result.changes
        if cs is None:
            return ApplyOutcome(state="not_applied", message="the result has no change set")
        layer = self.layers.pop(cs.layer, None)
        if layer is not None:
            layer.discard()
        else:
            await anyio.to_thread.run_sync(applying.discard, cs)
        return ApplyOutcome(state="discarded", message=f"the layer {cs.layer} was removed")

    async def gateway(self) -> Gateway:
        """The model gateway foreign agents of this supervisor call with their capability
        tokens; started on first use, closed when the supervisor closes."""
        if self._tg is None:
            raise RuntimeError("use the Supervisor as `async with Supervisor() as sup:`")
        return await self._gateway.get(self._tg)

    # --- children: registration, spawners -----------------------------------------------------

    def _keeper_ready(self) -> Keeper | None:
        """The keeper, started with the first child process this supervisor registers (its
        zygote's, its pool's or a run's): a supervisor whose children all run in memory never
        starts one. `None` when it cannot start (containment then relies on the supervisor
        living long enough to dispose of its children), and once the supervisor has closed."""
        if self._keeper is None and not self._keeper_tried and self._tg is not None:
            self._keeper_tried = True
            self._keeper = Keeper.start()
        return self._keeper

    def register(self, child: SupervisedProcess) -> None:
        """A child is alive: the keeper and the interpreter-exit hook know it from now on."""
        self._live[child.pid] = child
        keeper = self._keeper_ready()
        if keeper is not None:
            keeper.watch(child.pid, child.cgroup.procs_files if child.cgroup else ())

    def unregister(self, child: SupervisedProcess) -> None:
        self._live.pop(child.pid, None)
        if self._keeper is not None:
            self._keeper.forget(child.pid)

    async def spawner(self, cfg: ChildConfig) -> Spawner | None:
        """How a child of `cfg` is started: `None` for exec through the trampoline, or the
        zygote's fork (the zygote started, or restarted, first). With `spawner="zygote"` a
        zygote that cannot start or fork raises `SpawnError`; with the default `"auto"` the
        child is started by exec instead, and the returned `AutoSpawner` says why."""
        if not wants_zygote(cfg):
            return None
        contained = isinstance(resolve_launcher(cfg.launcher), Pidns)
        fork = self._contained_fork if contained else self._zygote_fork
        if cfg.spawner == "zygote":
            await self._zygote_ready(contained)
            return fork
        failed = self._contained_failed if contained else self._zygote_failed
        if failed is not None:
            return AutoSpawner(None, failed)
        try:
            await self._zygote_ready(contained)
        except SpawnError as exc:
            # Not tried again by this supervisor: every later run would wait for it to fail.
            failed = f"the zygote could not start: {exc}"
            if contained:
                self._contained_failed = failed
            else:
                self._zygote_failed = failed
            return AutoSpawner(None, failed)
        return AutoSpawner(fork, contains=fork.contains)

    async def _zygote_ready(self, contained: bool = False) -> Zygote:
        """The supervisor's zygote (`contained`: the one in a PID namespace of its own),
        started on first use (or taken from a run's plan, which launched it ahead) and again
        after it died; raises `SpawnError` when it cannot start."""
        async with self._zygote_lock:
            old = self._contained if contained else self._zygote
            if old is not None and old.usable:
                return old
            if contained:
                self._contained = None
            else:
                self._zygote = None
            if old is not None:
                await self._close_zygote(old)
            zygote = self._launched.pop(contained, None) or self._launch_zygote(contained)
            try:
                await zygote.ready()  # closes it when it fails
            except BaseException:
                if self._keeper is not None:
                    self._keeper.forget(zygote.pid)
                raise
            if contained:
                self._contained = zygote
            else:
                self._zygote = zygote
            return zygote

    def _launch_zygote(self, contained: bool) -> Zygote:
        """Start a zygote process (not ready yet: `Zygote.ready`), known to the keeper from
        its first moment; raises `SpawnError`."""
        keeper = self._keeper_ready()  # before the zygote, which is a child process too
        zygote = Zygote.launch(build_child_env(os.environ), contained=contained)
        if keeper is not None:
            keeper.watch(zygote.pid)
            # Each cgroup made for its standby too: if this supervisor dies, the keeper kills
            # what is in it and removes it (the child's own is watched as the child's).
            zygote.on_standby_cgroup = lambda procs: keeper.watch(zygote.pid, procs)
        return zygote

    def _head_start(self, cfg: ChildConfig) -> None:
        """A run's plan will have its child forked by the zygote (`PlanContext.ahead`): launch
        the zygote now if none runs or is being started, so that it imports the child runtime
        while the plan goes on. The first plan of a process probes the host's sandbox by
        running a trial child (≈ 40-60 ms, `isolation.probe_host`), and a zygote takes
        ≈ 0.15 s to get ready: a supervisor's first run waits for the longer of the two
        instead of their sum. Nothing is launched for a config the zygote would not serve, or
        after the zygote failed (`spawner="auto"` then uses exec); a launch that fails here is
        left to the run's own spawn, which reports it. A zygote launched for a plan that is
        then refused serves the next run, or is closed with the supervisor."""
        if self._tg is None or not wants_zygote(cfg):
            return
        contained = isinstance(resolve_launcher(cfg.launcher), Pidns)
        current = self._contained if contained else self._zygote
        failed = self._contained_failed if contained else self._zygote_failed
        if (
            (current is not None and current.usable)
            or contained in self._launched
            or failed is not None
            or self._zygote_lock.locked()  # a spawn is starting one, or has one
        ):
            return
        try:
            self._launched[contained] = self._launch_zygote(contained)
        except SpawnError:
            return

    async def _close_zygote(self, zygote: Zygote) -> None:
        await zygote.aclose()
        if self._keeper is not None:
            self._keeper.forget(zygote.pid)

    @property
    def zygote_pid(self) -> int | None:
        """The pid of this supervisor's zygote while one runs (`spawner="zygote"`)."""
        return self._zygote.pid if self._zygote is not None else None

    # --- the warm pool ----------------------------------------------------------------------

    @property
    def pool(self) -> WarmPool | None:
        """The warm pool, if this supervisor keeps one."""
        return self._pool

    def _make_pool(
        self,
        size: int,
        cfg: ChildConfig,
        limits: Limits,
        choice: Choice,
        workspace: str | None,
    ) -> WarmPool:
        tier = host(cfg.containment)
        spawner_box: list[Spawner | None] = [None]

        async def open_child() -> SupervisedChild:
            missing = missing_command(cfg.command, child_env(cfg))
            if missing:
                raise SpawnError(missing)
            return await spawn_child(
                cfg,
                limits,
                tier,
                "pool",
                spawner=spawner_box[0],
                workspace=workspace,
                level=choice.level,
            )

        async def prepare() -> None:
            spawner_box[0] = await self.spawner(cfg)

        async def ready(child: SupervisedChild) -> bool:
            return await handshake(child, cfg)

        return WarmPool(
            size,
            pool_key(cfg, limits, tier, choice.level, workspace),
            env=lambda: child_env(cfg),
            open=open_child,
            prepare=prepare,
            handshake=ready,
            register=self.register,
            unregister=self.unregister,
        )

    # --- interpreter exit -------------------------------------------------------------------

    def _kill_all_now(self) -> None:
        for child in list(self._live.values()):
            child.kill_now()
        for zygote in (self._zygote, self._contained):
            if zygote is not None:
                zygote.proc.send_signal(signal.SIGKILL)


_registry: weakref.WeakSet[SupervisorCore] = weakref.WeakSet()


@atexit.register
def _dispose_at_exit() -> None:
    for sup in list(_registry):
        sup._kill_all_now()


__all__ = ["SupervisorCore"]
