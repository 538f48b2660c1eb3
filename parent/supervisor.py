"""The supervisor: owns children, drives their runs, and always takes them down again.

Theory of operation
-------------------
A `Supervisor` is an async context manager that owns a task group. `start()` validates the
request (bad usage raises `ValueError` before anything is spawned), then runs the whole life of
one child in a task of that group, a `RunHandle`: spawn through the trampoline, handshake,
`agent/run`, and, on every path, the dispose ladder. The handle resolves to a `RunResult` and
never raises for anything the child did: what the supervisor saw is recorded in an `Observed`
record and classified once the child is gone.

Three clocks can end a run early, each recorded before the child is taken down: the handshake
timeout, the wall deadline (`timeout`) and the idle watchdog (`unresponsive`, any message from
the child re-arms it; children send heartbeats while they think). The idle clock stands still
while the parent is still answering one of the child's requests (a slow model turn is not the
child's silence) and the answer re-arms it. `cancel()` asks the child to abort
(`agent/cancel`) and gives it a grace to answer `aborted` itself before cutting the run.
If the caller of `run()` is cancelled, the child is disposed (shielded) before the cancellation
propagates. Leaving the supervisor disposes every child still running, and at interpreter exit
any child still registered gets its tree SIGKILLed. If the supervisor's process dies without
running any more code (SIGKILL), each child dies of PR_SET_PDEATHSIG and the supervisor's keeper
process (`keeper.py`) kills the rest of each child's tree.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import math
import os
import shutil
import signal
import sys
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from tether.contain.privileges import set_dumpable
from tether.parent.cgroups import TIERS, ChildCgroup, Host, available, choose, probe, sweep_stale
from tether.parent.child import LiveChild
from tether.parent.classify import Observed, classify, failure_of
from tether.parent.endpoint import ConnectionClosed, NotificationHandler, RequestHandler
from tether.parent.env import build_child_env
from tether.parent.events import ChildEvent, Event, RunFinished, RunStarted
from tether.parent.isolation import Choice, choose_level, isolation_setup, merged_env, probe_host
from tether.parent.keeper import Keeper
from tether.parent.launchers import LaunchContext, Launcher, Local, resolve_launcher
from tether.parent.limits import DisposePolicy, Limits
from tether.parent.models import ModelProvider, resolve_model
from tether.parent.pool import Pooled, WarmPool
from tether.parent.process import ChildProcess, SpawnError, SpawnSpec
from tether.parent.roles import resolve_agent
from tether.parent.tree import signal_procs, tree_procs
from tether.parent.zygote import Zygote
from tether.parent.zygote import supported as zygote_supported
from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES, SUPPORTED_VERSIONS, ErrorCode, RemoteError
from tether.protocol.messages import (
    PROTOCOL_VERSION,
    AgentCancelParams,
    AgentDefinition,
    AgentEventParams,
    AgentRunParams,
    ClientCapabilities,
    Failure,
    FailureKind,
    InitializeParams,
    InitializeResult,
    Isolation,
    ModelCompleteParams,
    PeerInfo,
    RunResult,
    ToolApproveParams,
    ToolApproveResult,
)

DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-I", "-m", "tether.child")

ApprovePolicy = Callable[[ToolApproveParams], Awaitable[ToolApproveResult] | ToolApproveResult]
EventCallback = Callable[[Event], None]

_run_ids = itertools.count(1)


@dataclass(frozen=True)
class ChildConfig:
    """How children are started and taken down; one per supervisor, overridable per run."""

    command: Sequence[str] = DEFAULT_COMMAND
    pass_env: Sequence[str] = ()
    """Names or globs of parent variables the child may inherit beyond the allowlist."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Explicit values merged over the scrubbed environment."""
    handshake_timeout: float = 10.0
    dispose: DisposePolicy = field(default_factory=DisposePolicy)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    stderr_ring_bytes: int = 64 * 1024
    cancel_grace: float = 2.0
    """After `agent/cancel`, how long the child has to answer `aborted` itself."""
    containment: str = "auto"
    """The containment tier: `auto` (the most complete this host offers), `cgroup2`, `cgroup1`
    or `process-group`. A tier this host does not offer is refused at `start()`."""
    launcher: str | Launcher = "local"
    """An argv prefix the command runs under (`local`, `bwrap`, `ssh:HOST`, `docker:IMAGE`,
    ..., or a `Launcher`); see `launchers.py` for what each provides."""
    spawner: str = "exec"
    """How a child process starts: `exec` (a fresh interpreter through the trampoline) or
    `zygote` (forked from a per-supervisor process that already imported the child runtime,
    with the same containment; see `zygote.py`). `zygote` serves only the default command
    (`python -I -m tether.child`, optionally with a custom agent) and the local launcher."""
    isolation: str = "auto"
    """`sandbox`, `process`, or `auto` (the strongest this host supports); see
    `isolation.py` and docs/containment.md. `sandbox` on a host that cannot provide it is
    refused at `start()`."""
    sandbox_user: tuple[int, int] | None = None
    """(uid, gid) sandboxed children run as when the supervisor is root; `None`: tether's
    dedicated default (`tether.contain.plan.DEFAULT_SANDBOX_ID`)."""
    read_paths: Sequence[str] = ()
    """More paths a sandboxed child may read (and execute), beyond what it is granted."""


@dataclass(frozen=True)
class PoolSpec:
    """Keep `size` initialized children ready for runs (`Supervisor(pool=PoolSpec(2))`).

    A run whose settings match the pool's (the child config's command, environment, containment,
    launcher and message cap, and the limits a child is spawned under: memory, cpu, processes,
    open files, file size) takes a ready child, its handshake already done; any other run
    spawns cold. Wall and idle limits are the run's own and start when it takes the child.
    A child serves one run only. Only the local launcher can be pooled (other launchers build
    their argv around the run's workspace)."""

    size: int
    limits: Limits = field(default_factory=Limits)
    config: ChildConfig | None = None
    """The children's config; `None`: the supervisor's."""
    workspace: str | os.PathLike[str] | None = None
    """The workspace the pool's children are sandboxed for (a sandboxed child is confined to
    one workspace from its first instruction, so only runs in this workspace take one).
    Required when the pool's isolation level is `sandbox`."""


def _pool_key(
    cfg: ChildConfig, limits: Limits, tier: Host, level: str, workspace: str | None
) -> tuple[Any, ...]:
    """What a child is spawned with; runs that agree on it can share a pool."""
    return (
        level,
        workspace if level == "sandbox" else None,
        cfg.sandbox_user,
        tuple(cfg.read_paths),
        tuple(cfg.command),
        tuple(cfg.pass_env),
        tuple(sorted(cfg.env.items())),
        tier.tier,
        cfg.launcher if isinstance(cfg.launcher, str) else id(cfg.launcher),
        cfg.max_message_bytes,
        cfg.stderr_ring_bytes,
        cfg.spawner,
        dataclasses.replace(limits, wall=None, idle=None),
    )


def _env_of(cfg: ChildConfig) -> dict[str, str]:
    return build_child_env(os.environ, pass_through=cfg.pass_env, explicit=cfg.env)


def _open_child(
    cfg: ChildConfig,
    limits: Limits,
    host: Host,
    tag: str,
    *,
    level: str,
    workspace: str | None,
    on_request: RequestHandler,
    on_notification: NotificationHandler,
    launch: Callable[[dict[str, str], list[str]], list[str]] | None = None,
    launcher: Launcher | None = None,
    spawn: Callable[[SpawnSpec], ChildProcess] | None = None,
) -> LiveChild:
    """Spawn one child the way every child is spawned: its own cgroup (on a cgroup tier), the
    scrubbed environment, the isolation level's plan and rlimits through the trampoline (or
    the zygote's fork, `spawn`). Raises `SpawnError`."""
    setup = isolation_setup(
        level,
        command=cfg.command,
        workspace=workspace,
        sandbox_user=cfg.sandbox_user,
        read_paths=cfg.read_paths,
        launcher=launcher,
    )
    try:
        cgroup = (
            ChildCgroup.create(
                host,
                f"{os.getpid()}-{tag}-{os.urandom(3).hex()}",
                memory=limits.memory_bytes,
                pids=limits.processes,
            )
            if host.tier != "process-group"
            else None
        )
    except OSError as exc:
        raise SpawnError(f"cannot create the child's cgroup: {exc.strerror or exc}") from exc
    child = LiveChild.open(
        SpawnSpec(
            setup.argv,
            merged_env(_env_of(cfg), setup.setup, cfg.env),
            cwd=None,
            rlimits=limits.rlimits(
                memory_in_cgroup=cgroup is not None and host.enforces("memory"),
                pids_in_cgroup=cgroup is not None and host.enforces("pids"),
            ),
            plan=setup.outer_plan,
        ),
        on_request=on_request,
        on_notification=on_notification,
        max_message_bytes=cfg.max_message_bytes,
        ring_bytes=cfg.stderr_ring_bytes,
        cgroup=cgroup,
        launch=launch,
        spawn=spawn,
        cleanup=setup.setup.cleanup,
    )
    return child


async def _handshake(child: LiveChild, cfg: ChildConfig) -> bool:
    """`initialize`, within the handshake timeout; whether the child is ready for a run. What
    went wrong is recorded in `child.observed`."""
    observed = child.observed
    hs = cfg.handshake_timeout
    try:
        with anyio.fail_after(hs):
            init: InitializeResult = await child.request(
                "initialize",
                InitializeParams(
                    protocol_version=PROTOCOL_VERSION,
                    client_info=PeerInfo(name="tether-supervisor", version=_version()),
                    capabilities=ClientCapabilities(),
                    max_message_bytes=cfg.max_message_bytes,
                ),
            )
    except TimeoutError:
        observed.handshake = hs
        return False
    except ConnectionClosed:
        return False
    except RemoteError as exc:
        observed.protocol_error = f"the child refused initialize: {exc.message}"
        return False
    if init.protocol_version not in SUPPORTED_VERSIONS:
        observed.protocol_error = (
            f"the child answered initialize with protocol version {init.protocol_version}; "
            f"this parent speaks {', '.join(map(str, SUPPORTED_VERSIONS))}"
        )
        return False
    return True


class RunHandle:
    """One run in one child. Await `result()`; `cancel()` aborts it."""

    def __init__(
        self,
        sup: Supervisor,
        run_id: str,
        params: AgentRunParams,
        config: ChildConfig,
        limits: Limits,
        containment: Host,
        model: ModelProvider | None,
        approve: ApprovePolicy | None,
        on_event: EventCallback | None,
        isolation: Choice | None = None,
    ) -> None:
        self.run_id = run_id
        self.isolation = isolation or Choice("process")
        """The isolation level this run's child gets (and why it is weaker, if it is)."""
        self._sup = sup
        self._params = params
        self._config = config
        self._limits = limits
        self.host = containment
        """The containment tier this run's child is under."""
        self._model = model
        self._providers: dict[str, ModelProvider | None] = {}
        self._approve = approve
        self._on_event = on_event
        self._done = anyio.Event()
        self._result: RunResult | None = None
        self._child: LiveChild | None = None
        self._drive_scope: anyio.CancelScope | None = None
        self._outer_scope = anyio.CancelScope()
        self.pid: int | None = None

    # --- public -------------------------------------------------------------------------------

    async def result(self) -> RunResult:
        await self._done.wait()
        assert self._result is not None
        return self._result

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def cancel(self, reason: str = "cancelled by the parent") -> RunResult:
        """Abort the run: ask the child, then cut it if it does not answer within the grace."""
        child = self._child
        if not self._done.is_set() and child is not None:
            with anyio.move_on_after(0.5):
                with contextlib.suppress(ConnectionClosed):
                    await child.notify(
                        "agent/cancel", AgentCancelParams(run_id=self.run_id, reason=reason)
                    )
            with anyio.move_on_after(self._config.cancel_grace):
                await self._done.wait()
        if not self._done.is_set():
            self.abort()
        return await self.result()

    def abort(self) -> None:
        """Cut the run now (no grace); the result is `aborted` / `cancelled`."""
        if self._done.is_set():
            return
        if self._child is not None:
            self._child.observed.cancelled = True
        if self._drive_scope is not None:
            self._drive_scope.cancel()
        else:
            self._outer_scope.cancel()

    # --- the run ------------------------------------------------------------------------------

    async def _execute(self) -> None:
        observed = Observed()
        answer: RunResult | None = None
        try:
            with self._outer_scope:
                answer, observed = await self._spawn_and_drive(observed)
        finally:
            if self._outer_scope.cancelled_caught and not observed.spawn_error:
                observed.cancelled = True
            result = self._build(observed, answer)
            self._result = result
            self._done.set()
            self._sup._publish(RunFinished(self.run_id, result), self._on_event)

    async def _spawn_and_drive(self, observed: Observed) -> tuple[RunResult | None, Observed]:
        cfg = self._config
        # Everything up to the spawn is synchronous: a run cancelled before its task got here
        # must stop at this checkpoint, not start a child only to take it down again.
        await anyio.lowlevel.checkpoint()
        launcher = resolve_launcher(cfg.launcher)
        missing = None
        if launcher.program is not None:
            missing = _missing_command([launcher.program], self._env(), "the launcher")
        if missing is None and not launcher.provides.eof_teardown_only:
            missing = _missing_command(cfg.command, self._env())
        if missing:
            observed.spawn_error = missing
            return None, observed
        pool = self._sup._pool
        if pool is not None and isinstance(launcher, Local):
            key = _pool_key(
                cfg, self._limits, self.host, self.isolation.level, self._params.workspace
            )
            pooled = pool.acquire(key, self._env())
            if pooled is not None:
                return await self._drive_pooled(pooled)
        try:
            if cfg.spawner == "zygote":
                await self._sup._zygote_ready()
            child = _open_child(
                cfg,
                self._limits,
                self.host,
                self.run_id.rsplit("-", 1)[-1],
                level=self.isolation.level,
                workspace=self._params.workspace,
                on_request=self._on_request,
                on_notification=self._on_notification,
                launch=None if isinstance(launcher, Local) else self._launch(launcher),
                launcher=launcher,
                spawn=self._sup._spawner(cfg),
            )
        except SpawnError as exc:
            observed.spawn_error = str(exc)
            return None, observed
        self._child = child
        self.pid = child.pid
        observed = child.observed
        observed.limits = self._limits.shown()
        self._sup._register(child)
        answer: RunResult | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(child.read_stdout, tg)
                tg.start_soon(child.drain_stderr)
                tg.start_soon(child.watch_exit)
                answer = await self._supervise(child, tg, handshake=True)
                tg.cancel_scope.cancel()
        finally:
            # Cancellation of the caller lands here too: the child must still go, shielded.
            await child.dispose(cfg.dispose, polite=observed.answered)
            self._sup._unregister(child)
            exec_error = child.spawn_failure()
            if exec_error and answer is None:
                observed.spawn_error = f"cannot start {cfg.command[0]!r}: {exec_error}"
        return answer, observed

    async def _drive_pooled(self, pooled: Pooled) -> tuple[RunResult | None, Observed]:
        """A run in a child the pool started and initialized; the pool runs its reader, stderr
        drain and exit watch, this run drives and disposes it, then releases it."""
        child = pooled.child
        pooled.bind(self._on_request, self._on_notification)
        self._child = child
        self.pid = child.pid
        observed = child.observed
        observed.limits = self._limits.shown()
        answer: RunResult | None = None
        try:
            async with anyio.create_task_group() as tg:
                answer = await self._supervise(child, tg, handshake=False)
                tg.cancel_scope.cancel()
        finally:
            await child.dispose(self._config.dispose, polite=observed.answered)
            pooled.release()
        return answer, observed

    async def _supervise(
        self, child: LiveChild, tg: TaskGroup, *, handshake: bool
    ) -> RunResult | None:
        """Drive one run under the wall clock (from here: a pooled child's clock starts when
        the run takes it), then dispose of the child."""
        cfg = self._config
        observed = child.observed
        self._sup._publish(RunStarted(self.run_id, child.pid, tuple(cfg.command)), self._on_event)
        answer: RunResult | None = None
        wall = self._limits.wall_seconds
        with anyio.CancelScope() as drive:
            self._drive_scope = drive
            with anyio.move_on_after(wall if wall is not None else math.inf) as clock:
                answer = await self._drive(child, tg, handshake=handshake)
            if clock.cancelled_caught and wall is not None and answer is None:
                observed.deadline = wall
        self._drive_scope = None
        # A child that answered gets the polite `shutdown` rung; one that was cut off
        # (deadline, idle, cancel, broken wire) starts at the EOF lifeline.
        await child.dispose(cfg.dispose, polite=observed.answered)
        return answer

    async def _drive(
        self, child: LiveChild, tg: TaskGroup, *, handshake: bool = True
    ) -> RunResult | None:
        observed = child.observed
        if handshake and not await _handshake(child, self._config):
            return None
        idle = self._limits.idle_seconds
        if idle is not None:
            tg.start_soon(self._watch_idle, child, idle, time.monotonic())
        try:
            answer: RunResult = await child.request("agent/run", self._params)
        except ConnectionClosed:
            return None
        except RemoteError as exc:
            observed.answered = True
            observed.agent_error = f"the child refused the run: {exc.message} ({exc.code})"
            return None
        observed.answered = True
        return answer

    async def _watch_idle(self, child: LiveChild, idle: float, since: float) -> None:
        while True:
            # A pooled child was quiet in the pool before this run: count from the run's start.
            quiet = min(child.endpoint.quiet_for(), time.monotonic() - since)
            if quiet >= idle:
                child.observed.idle = idle
                if self._drive_scope is not None:
                    self._drive_scope.cancel()
                return
            await anyio.sleep(idle - quiet)

    # --- what the child asks ------------------------------------------------------------------

    async def _on_request(self, method: str, params: Any) -> Any:
        if method == "model/complete":
            assert isinstance(params, ModelCompleteParams)
            provider = self._provider_for(params.model)
            if provider is None:
                raise RemoteError(
                    ErrorCode.NO_MODEL,
                    "no model is configured for this run (pass model=..., or --model on the CLI)",
                )
            try:
                return await provider.complete(params)
            except RemoteError:
                raise
            except Exception as exc:
                raise RemoteError(
                    ErrorCode.MODEL_ERROR, f"the model provider failed: {type(exc).__name__}"
                ) from exc
        if method == "tool/approve":
            assert isinstance(params, ToolApproveParams)
            if self._approve is None:
                return ToolApproveResult(allow=True, reason="allowed by the default policy")
            got = self._approve(params)
            if not isinstance(got, ToolApproveResult):
                got = await got
            return got
        raise RemoteError(ErrorCode.METHOD_NOT_FOUND, f"the parent does not serve {method!r}")

    def _provider_for(self, name: str | None) -> ModelProvider | None:
        """The run's provider, or another one when the child names a model string the parent
        can build (a definition's `compactionModel`, say `openai:small-model`). Names that are
        not model strings (`"gpt-4o"`) mean the run's own provider."""
        if not name or ":" not in name:
            return self._model
        if name not in self._providers:
            try:
                self._providers[name] = resolve_model(name)
            except ValueError:
                self._providers[name] = self._model
        return self._providers[name]

    def _on_notification(self, method: str, params: Any) -> None:
        if method == "agent/event" and isinstance(params, AgentEventParams):
            self._sup._publish(
                ChildEvent(params.run_id, params.seq, params.kind, dict(params.data)),
                self._on_event,
            )

    # --- helpers ------------------------------------------------------------------------------

    def _launch(self, launcher: Launcher) -> Callable[[dict[str, str], list[str]], list[str]]:
        def argv(env: dict[str, str], command: list[str]) -> list[str]:
            return launcher.argv(
                LaunchContext(
                    command=command,
                    env=env,
                    explicit_env=dict(self._config.env),
                    workspace=self._params.workspace,
                    limits=self._limits,
                    read_paths=tuple(self._config.read_paths),
                )
            )

        return argv

    def _env(self) -> dict[str, str]:
        return _env_of(self._config)

    def _build(self, observed: Observed, answer: RunResult | None) -> RunResult:
        result = self._result_of(observed, answer)
        if observed.survivors:
            # The promise is "nothing left running"; when the kernel would not let us keep it
            # (a process stuck in uninterruptible sleep, one we may not signal), say so.
            note = (
                f"{len(observed.survivors)} process(es) of the child's tree could not be "
                f"killed: pids {', '.join(map(str, observed.survivors))}"
            )
            message = f"{result.message}; {note}" if result.message else note
            result = msgspec.structs.replace(result, message=message)
        return result

    def _result_of(self, observed: Observed, answer: RunResult | None) -> RunResult:
        if answer is not None:
            if not answer.success and answer.failure is None:
                # Every unsuccessful result names its failure kind, also when the child's own
                # answer left it out (an `aborted` answer to `agent/cancel`, say).
                kind: FailureKind = "cancelled" if answer.status == "aborted" else "agent_error"
                answer = msgspec.structs.replace(
                    answer,
                    failure=Failure(
                        kind=kind, rung=observed.rung, stderr_tail=observed.stderr_tail
                    ),
                )
            return msgspec.structs.replace(
                answer,
                run_id=self.run_id,
                containment=self.host.tier,
                isolation=self._isolation_report(),
            )
        got = classify(observed)
        failure = failure_of(observed)
        assert got is not None and failure is not None  # unanswered always classifies
        kind, message = got
        if failure.stderr_tail and kind in ("exit_nonzero", "crashed", "spawn_failed"):
            last = failure.stderr_tail.strip().splitlines()[-1:] or [""]
            message = f"{message}: {last[0][:200]}"
        return RunResult(
            success=False,
            status="aborted" if kind == "cancelled" else "error",
            message=message,
            failure=failure,
            run_id=self.run_id,
            containment=self.host.tier,
            isolation=self._isolation_report(),
        )

    def _isolation_report(self) -> Isolation:
        choice = self.isolation
        abi = probe_host().landlock_abi if choice.level == "sandbox" else None
        return Isolation(level=choice.level, landlock_abi=abi, warning=choice.warning)


class Supervisor:
    """Owns children and their teardown. Use as `async with Supervisor() as sup:`."""

    def __init__(self, config: ChildConfig | None = None, *, pool: PoolSpec | None = None) -> None:
        self.config = config or ChildConfig()
        self._pool_spec = pool
        self._pool: WarmPool | None = None
        self._tg: TaskGroup | None = None
        self._live: dict[int, LiveChild] = {}
        self._handles: set[RunHandle] = set()
        self._subscribers: list[EventCallback] = []
        self._keeper: Keeper | None = None
        self._zygote: Zygote | None = None
        self._zygote_lock = anyio.Lock()
        self._warned = False
        self.host = host()
        """What `containment="auto"` picks on this host; each run names its own tier
        (`RunHandle.host`, `RunResult.containment`)."""
        if pool is not None:
            cfg = pool.config or self.config
            if not isinstance(resolve_launcher(cfg.launcher), Local):
                raise ValueError("a pool holds local children only (launcher='local')")
            _check_spawner(cfg)
            choice = choose_level(cfg.isolation)
            workspace = None
            if pool.workspace is not None:
                workspace = str(Path(pool.workspace).resolve())
            elif choice.level == "sandbox":
                raise ValueError(
                    "a sandboxed pool serves one workspace: pass PoolSpec(workspace=...), or "
                    "isolation='process' in the pool's config"
                )
            self._pool = self._make_pool(
                pool.size, cfg, pool.limits, host(cfg.containment), choice, workspace
            )
            self._warn_once(choice)
        _registry.add(self)

    def _warn_once(self, choice: Choice) -> None:
        """Say on stderr, once per supervisor, that `auto` settled for less than a sandbox."""
        if choice.warning and probe_host().why_not and not self._warned:
            self._warned = True
            sys.stderr.write(f"tether: warning: {choice.warning}\n")
            sys.stderr.flush()

    def _make_pool(
        self,
        size: int,
        cfg: ChildConfig,
        limits: Limits,
        tier: Host,
        choice: Choice,
        workspace: str | None,
    ) -> WarmPool:
        def open_child(
            on_request: Callable[[str, Any], Awaitable[Any]],
            on_notification: Callable[[str, Any], None],
        ) -> LiveChild:
            missing = _missing_command(cfg.command, _env_of(cfg))
            if missing:
                raise SpawnError(missing)
            child = _open_child(
                cfg,
                limits,
                tier,
                "pool",
                level=choice.level,
                workspace=workspace,
                on_request=on_request,
                on_notification=on_notification,
                spawn=self._spawner(cfg),
            )
            child.observed.limits = limits.shown()
            return child

        async def handshake(child: LiveChild) -> bool:
            return await _handshake(child, cfg)

        async def prepare() -> None:
            if cfg.spawner == "zygote":
                await self._zygote_ready()

        return WarmPool(
            size,
            _pool_key(cfg, limits, tier, choice.level, workspace),
            env=lambda: _env_of(cfg),
            open=open_child,
            prepare=prepare,
            handshake=handshake,
            register=self._register,
            unregister=self._unregister,
            dispose=cfg.dispose,
        )

    # --- the zygote ---------------------------------------------------------------------------

    async def _zygote_ready(self) -> Zygote:
        """The supervisor's zygote, started on first use and again after it died; raises
        `SpawnError` when it cannot start."""
        async with self._zygote_lock:
            old = self._zygote
            if old is not None and old.usable:
                return old
            self._zygote = None
            if old is not None:
                await self._close_zygote(old)
            zygote = await Zygote.start(build_child_env(os.environ))
            self._zygote = zygote
            if self._keeper is not None:
                self._keeper.watch(zygote.pid)
            return zygote

    async def _close_zygote(self, zygote: Zygote) -> None:
        await zygote.aclose()
        if self._keeper is not None:
            self._keeper.forget(zygote.pid)

    def _spawner(self, cfg: ChildConfig) -> Callable[[SpawnSpec], ChildProcess] | None:
        if cfg.spawner != "zygote":
            return None

        def spawn(spec: SpawnSpec) -> ChildProcess:
            zygote = self._zygote
            if zygote is None:
                raise SpawnError("the zygote is not running")
            extras = spec.argv[len(DEFAULT_COMMAND) :]
            return zygote.spawn(dataclasses.replace(spec, argv=extras))

        return spawn

    @property
    def zygote_pid(self) -> int | None:
        """The pid of this supervisor's zygote while one runs (`spawner="zygote"`)."""
        return self._zygote.pid if self._zygote is not None else None

    @property
    def pool(self) -> WarmPool | None:
        """The warm pool, if this supervisor keeps one."""
        return self._pool

    def _register(self, child: LiveChild) -> None:
        self._live[child.pid] = child
        if self._keeper is not None:
            self._keeper.watch(child.pid, child.cgroup.procs_files if child.cgroup else ())

    def _unregister(self, child: LiveChild) -> None:
        self._live.pop(child.pid, None)
        if self._keeper is not None:
            self._keeper.forget(child.pid)

    async def __aenter__(self) -> Supervisor:
        # Non-dumpable: no child (same user or not) may read this process's environment,
        # memory or descriptors through /proc, or ptrace it. Process-wide and kept.
        set_dumpable(False)
        self._keeper = Keeper.start()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
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
                await handle._done.wait()
            if self._pool is not None:
                self._pool.close()  # idle children go down the ladder; the group waits for it
        # Every run is done, so the group has nothing left to wait for. An exception from the
        # body propagates as itself rather than wrapped in an ExceptionGroup.
        tg, self._tg = self._tg, None
        try:
            await tg.__aexit__(None, None, None)
        finally:
            zygote, self._zygote = self._zygote, None
            if zygote is not None:
                with anyio.CancelScope(shield=True):
                    await self._close_zygote(zygote)
            keeper, self._keeper = self._keeper, None
            if keeper is not None:
                with anyio.CancelScope(shield=True):
                    await keeper.aclose()
        return None

    # --- runs ---------------------------------------------------------------------------------

    async def start(
        self,
        prompt: str,
        *,
        agent: str | AgentDefinition = "general",
        # a role name, an AgentDefinition, or "module:callable" / "file.py:callable" for your
        # own agent implementation hosted by the child
        workspace: str | os.PathLike[str] = ".",
        model: str | ModelProvider | None = None,
        limits: Limits | None = None,
        description: str = "",
        command: Sequence[str] | None = None,
        approve: ApprovePolicy | None = None,
        on_event: EventCallback | None = None,
        config: ChildConfig | None = None,
        run_id: str | None = None,
    ) -> RunHandle:
        """Start one run in a fresh child and return its handle. Raises `ValueError` for bad
        usage (unknown agent, unreadable model script, bad limits), before spawning."""
        if self._tg is None:
            raise RuntimeError("use the Supervisor as `async with Supervisor() as sup:`")
        impl: str | None = None
        if isinstance(agent, str) and ":" in agent:
            # Bring your own agent: the child hosts `module:callable` (or `file.py:callable`)
            # with the same context as the built-in loop, under the same supervision.
            impl = _agent_impl(agent, command)
            agent = AgentDefinition(type="custom", description=f"custom agent {impl}")
        definition = resolve_agent(agent)
        provider = resolve_model(model) if isinstance(model, str) else model
        if provider is None and definition.model:
            provider = resolve_model(definition.model)
        ws = Path(workspace).resolve()
        if not ws.is_dir():
            raise ValueError(f"workspace {str(workspace)!r} is not a directory")
        cfg = config or self.config
        if command is not None:
            if not command:
                raise ValueError("command must not be empty")
            cfg = dataclasses.replace(cfg, command=tuple(command))
        if impl is not None:
            cfg = dataclasses.replace(cfg, command=(*cfg.command, "--agent", impl))
        rid = run_id or f"run-{os.getpid()}-{next(_run_ids)}"
        params = AgentRunParams(
            run_id=rid,
            prompt=prompt,
            agent=definition,
            description=description,
            workspace=str(ws),
        )
        tier = host(cfg.containment)
        launcher = resolve_launcher(cfg.launcher)  # an unknown launcher is bad usage
        _check_spawner(cfg)
        remote = launcher.name if launcher.provides.eof_teardown_only else None
        choice = choose_level(cfg.isolation, remote_launcher=remote)
        self._warn_once(choice)
        handle = RunHandle(
            self, rid, params, cfg, limits or Limits(), tier, provider, approve, on_event, choice
        )
        self._handles.add(handle)
        self._tg.start_soon(self._run_handle, handle)
        return handle

    async def _run_handle(self, handle: RunHandle) -> None:
        try:
            await handle._execute()
        finally:
            self._handles.discard(handle)

    async def run(self, prompt: str, **kwargs: Any) -> RunResult:
        """Run one sub-agent to its end and return its `RunResult`; never raises for anything
        the child does. If this call is cancelled, the child is disposed first."""
        handle = await self.start(prompt, **kwargs)
        try:
            return await handle.result()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                handle.abort()
                await handle._done.wait()
            raise

    # --- events -------------------------------------------------------------------------------

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call `callback` for every event; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    @contextlib.asynccontextmanager
    async def events(self) -> AsyncIterator[AsyncIterator[Event]]:
        """`async with sup.events() as stream: async for ev in stream: ...` — nothing is
        dropped: the stream buffers what the consumer has not read yet."""
        send, receive = anyio.create_memory_object_stream[Event](math.inf)
        unsubscribe = self.subscribe(send.send_nowait)
        try:
            async with receive:
                yield receive
        finally:
            unsubscribe()
            send.close()

    def _publish(self, event: Event, extra: EventCallback | None) -> None:
        for cb in ([extra] if extra else []) + list(self._subscribers):
            try:
                cb(event)
            except Exception:  # a listener's bug must not break the run
                pass

    # --- interpreter exit ---------------------------------------------------------------------

    def _kill_all_now(self) -> None:
        for child in list(self._live.values()):
            procs = tree_procs(child.pid, child.marker)
            child.proc.send_signal(signal.SIGKILL)
            signal_procs(procs, signal.SIGKILL)
        if self._zygote is not None:
            self._zygote.proc.send_signal(signal.SIGKILL)


def _agent_impl(spec: str, command: Sequence[str] | None) -> str:
    """Check a `module:callable` or `path.py:callable` agent spec; file paths become absolute
    because the child runs isolated (`-I`) and resolves nothing against our working directory."""
    if command is not None:
        raise ValueError("a custom agent runs in tether's own child; it cannot take a command")
    target, _, attr = spec.rpartition(":")
    if not target or not attr.isidentifier():
        raise ValueError(f"agent {spec!r}: expected module:callable or path/to/file.py:callable")
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise ValueError(f"agent {spec!r}: no such file {str(path)!r}")
        return f"{path}:{attr}"
    if not all(part.isidentifier() for part in target.split(".")):
        raise ValueError(f"agent {spec!r}: {target!r} is not a module name")
    return spec


def _check_spawner(cfg: ChildConfig) -> None:
    """Refuse a spawner the config cannot use (bad usage, before anything is spawned)."""
    if cfg.spawner == "exec":
        return
    if cfg.spawner != "zygote":
        raise ValueError(f"spawner {cfg.spawner!r}: expected 'exec' or 'zygote'")
    if tuple(cfg.command[: len(DEFAULT_COMMAND)]) != DEFAULT_COMMAND:
        raise ValueError(
            "spawner='zygote' forks tether's own child runtime: it serves only the default "
            f"command ({' '.join(DEFAULT_COMMAND)}), not {' '.join(cfg.command)!r}"
        )
    if not isinstance(resolve_launcher(cfg.launcher), Local):
        raise ValueError("spawner='zygote' forks local children only (launcher='local')")
    why = zygote_supported()
    if why is not None:
        raise ValueError(f"spawner='zygote' is not available on this host: {why}")


def _missing_command(command: Sequence[str], env: Mapping[str, str], what: str = "") -> str | None:
    exe = command[0]
    if what:
        exe_missing = _missing_command(command, env)
        return f"{exe_missing} ({what})" if exe_missing else None
    if os.sep in exe:
        if not os.path.exists(exe):
            return f"cannot start {exe!r}: no such file"
        if not os.access(exe, os.X_OK):
            return f"cannot start {exe!r}: not executable"
        return None
    if shutil.which(exe, path=env.get("PATH", os.defpath)) is None:
        return f"cannot start {exe!r}: command not found on the child's PATH"
    return None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tether")
    except Exception:
        return "0"


_hosts: dict[str, Host] = {}


def host(containment: str = "auto") -> Host:
    """The containment tier `containment` names (`auto`: the most complete this host offers),
    detected once per process; the first call also sweeps cgroups left behind by supervisors
    that were killed. Raises `ValueError` for an unknown tier or one this host does not offer."""
    if not _hosts:
        probes = {tier: probe(tier) for tier in TIERS}
        for got in probes.values():
            if got.parents:
                sweep_stale(got)
        _hosts.update(probes)
        _hosts["auto"] = choose(probes)
    if containment not in _hosts:
        raise ValueError(f"containment {containment!r}: expected auto or one of {', '.join(TIERS)}")
    got = _hosts[containment]
    if not available(got):
        raise ValueError(f"containment {containment!r} is not available on this host: {got.why}")
    return got


_registry: weakref.WeakSet[Supervisor] = weakref.WeakSet()


@atexit.register
def _dispose_at_exit() -> None:
    for sup in list(_registry):
        sup._kill_all_now()
