"""The supervisor: owns children, runs their runs, and always takes them down again.

Theory of operation
-------------------
A `Supervisor` is an async context manager that owns a task group, a keeper process, and,
when used, a zygote and a warm pool. `start()` checks the request (bad usage raises
`ValueError` before anything is spawned), resolves the run's models, and runs the whole life of
one run in a task of that group (`handle.RunHandle`), which resolves to a `RunResult` and never
raises for anything the child did. Every child is registered while it lives: with the keeper,
so a SIGKILLed supervisor's trees still die (`process/keeper.py`), and with the exit hook,
which SIGKILLs any child still registered. If the caller of `run()` is cancelled, the child is
disposed (shielded) before the cancellation propagates. Leaving the supervisor aborts every run
still going and waits until each child is gone.

The parts: `spawning` (environment, cgroup, launcher, spawner; the handshake), `host` (what this
host can contain), `broker` (what a child may ask), `runs` (one run's clocks and drive),
`results` (the result), `supervised` (the child handle and its dispose ladder), `pool`,
`zygote`, `keeper`.

Providers: every run is carried out by a named provider of `sup.providers` (`spawn` by
default; `fork`, `command`, `inprocess`, `acp`, and any a user registers), which prepares the
run's request before anything is spawned and may drive the run its own way
(`tether.parent.providers`). Foreign agents reach their model through the supervisor's model
gateway, started on first use (`gateway()`) and closed when the supervisor closes.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import os
import signal
import sys
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from tether.contain.privileges import set_dumpable
from tether.parent.models import ModelProvider
from tether.parent.process.cgroups import sweep_stale_once
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig, PoolSpec, pool_key
from tether.parent.process.env import build_child_env
from tether.parent.process.host import host
from tether.parent.process.isolation import Choice, choose_level, probe_host, workspace_problem
from tether.parent.process.keeper import Keeper
from tether.parent.process.launchers import Local, resolve_launcher
from tether.parent.process.limits import Limits, raise_open_files_limit
from tether.parent.process.pool import WarmPool
from tether.parent.process.proc import SpawnError
from tether.parent.process.spawn import (
    AutoSpawner,
    Spawner,
    check_spawner,
    child_env,
    handshake,
    missing_command,
    spawn_child,
    wants_zygote,
)
from tether.parent.process.supervised import SupervisedChild, SupervisedProcess
from tether.parent.process.zygote import Zygote, ZygoteSpawner
from tether.parent.providers.base import Provider, ProviderBody, SubagentRequest
from tether.parent.providers.builtin import SpawnProvider, builtin_providers
from tether.parent.providers.gateway_seat import GatewaySeat
from tether.parent.providers.inprocess import InProcessProvider
from tether.parent.run.broker import ApprovePolicy, ParentTool, TurnHook, resolve_models
from tether.parent.run.checks import check_model, warn_idle
from tether.parent.run.events import DEFAULT_EVENT_BUFFER, Event, EventStream
from tether.parent.run.handle import Continuation, EventCallback, RunHandle
from tether.parent.run.roles import resolve_agent
from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES, encode_request
from tether.protocol.messages import AgentDefinition, AgentRunParams, ChatMessage, RunResult
from tether.protocol.methods import AGENT_RUN

if TYPE_CHECKING:
    from tether.parent.agents.service import AgentHandle, Agents
    from tether.parent.agents.sessions import AgentSummary
    from tether.parent.delegation.orchestrator import Orchestration
    from tether.parent.gateway import Gateway

_run_ids = itertools.count(1)


class Supervisor:
    """Owns children and their teardown. Use as `async with Supervisor() as sup:`."""

    def __init__(
        self,
        config: ChildConfig | None = None,
        *,
        pool: PoolSpec | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """`state_dir`: where continuable agents' sessions are stored (default
        `$XDG_STATE_HOME/tether`); opened on first use of `spawn_agent` and the like."""
        self.config = config or ChildConfig()
        self._state_dir = state_dir
        self._agents: Agents | None = None
        self._pool: WarmPool | None = None
        self._tg: TaskGroup | None = None
        self._live: dict[int, SupervisedProcess] = {}
        self._handles: set[RunHandle] = set()
        self._subscribers: list[EventCallback] = []
        self._keeper: Keeper | None = None
        self._zygote: Zygote | None = None
        self._zygote_lock = anyio.Lock()
        self._zygote_fork = ZygoteSpawner(lambda: self._zygote, skip=len(DEFAULT_COMMAND))
        self._zygote_failed: str | None = None
        """Why the zygote could not start (`spawner="auto"` then uses exec)."""
        self._warned = False
        self.providers = builtin_providers()
        """The ways this supervisor runs a sub-agent, by name (`start(provider=...)`); register
        your own here."""
        self._gateway = GatewaySeat()
        self.host = host()
        """What `containment="auto"` picks on this host; each run names its own tier
        (`RunHandle.host`, `RunResult.containment`)."""
        if pool is not None:
            cfg = pool.config or self.config
            if not isinstance(resolve_launcher(cfg.launcher), Local):
                raise ValueError("a pool holds local children only (launcher='local')")
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
        """Say on stderr, once per supervisor, that `auto` settled for less than a sandbox."""
        if choice.warning and probe_host().why_not and not self._warned:
            self._warned = True
            sys.stderr.write(f"tether: warning: {choice.warning}\n")
            sys.stderr.flush()

    async def __aenter__(self) -> Supervisor:
        # Non-dumpable: no child (same user or not) may read this process's environment,
        # memory or descriptors through /proc, or ptrace it. Process-wide and kept.
        set_dumpable(False)
        # Each live child holds several of our descriptors: the soft limit goes up to the hard
        # one, once per process (children still start with the soft limit we were given).
        raise_open_files_limit()
        # What supervisors that were SIGKILLed left behind (their keeper may have died too).
        sweep_stale_once()
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
                await handle.wait()
            if self._pool is not None:
                self._pool.close()  # idle children go down the ladder; the group waits for it
            if self._agents is not None:
                await self._agents.aclose()  # leases released, the store closed
            self._gateway.close()  # the gateway's task ends; the group waits for it
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

    # --- runs -------------------------------------------------------------------------------

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
        parent_tools: Sequence[ParentTool] = (),
        history: Sequence[ChatMessage] = (),
        on_turn: TurnHook | None = None,
        continuation: Continuation | None = None,
        provider: str | Provider | None = None,
        fork_from: RunHandle | None = None,
    ) -> RunHandle:
        """Start one run and return its handle. Raises `ValueError` for bad usage (unknown
        agent or provider, unreadable model script, bad limits, no model for the built-in
        agent loop), before spawning; warns (`RuntimeWarning`) when the idle limit is too close
        to tether's heartbeat interval to let a slow tool call finish (`run/checks.py`).

        `parent_tools`: tools this parent serves for the run itself (`tool/call`), offered to
        its agent beside the child's own; `history`: a transcript the run starts from;
        `on_turn`: told of every model turn the parent brokers for the run, before the child
        gets the answer (to record the transcript durably); `continuation`: keep the child
        after it answers, for follow-ups (`RunHandle.message`; see `run/handle.py`). `provider`:
        what runs it, a name of `self.providers` (`NAME` or `NAME:ARGUMENT`, e.g.
        `acp:node agent.js`) or a `Provider`; default `spawn`, or `command` when `command` is
        given. `fork_from`: the run whose completed turns a `fork` starts from."""
        if self._tg is None:
            raise RuntimeError("use the Supervisor as `async with Supervisor() as sup:`")
        if provider is None:
            provider = "command" if command is not None else "spawn"
        chosen, argument = self.providers.select(provider)
        impl: str | None = None
        if isinstance(agent, str) and ":" in agent:
            # Bring your own agent: the child hosts `module:callable` (or `file.py:callable`)
            # with the same context as the built-in loop, under the same supervision.
            impl = _agent_impl(agent, command)
            if not isinstance(chosen, (SpawnProvider, InProcessProvider)):
                raise ValueError(
                    f"a custom agent runs in tether's own runtime; provider {chosen.name!r} "
                    "runs something else (use spawn, fork or inprocess)"
                )
            agent = AgentDefinition(type="custom", description=f"custom agent {impl}")
        definition = resolve_agent(agent)
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
        request = chosen.prepare(
            SubagentRequest(
                run_id=run_id or f"run-{os.getpid()}-{next(_run_ids)}",
                prompt=prompt,
                agent=definition,
                workspace=str(ws),
                config=cfg,
                history=tuple(history),
                description=description,
                argument=argument,
                caller_turns=tuple(fork_from.broker.completed_turns()) if fork_from else (),
                parent_tools=tuple(t.spec for t in parent_tools),
                command_given=command is not None,
            )
        )
        cfg = request.config
        tier = host(cfg.containment)
        launcher = resolve_launcher(cfg.launcher)  # an unknown launcher is bad usage
        check_spawner(cfg)
        remote = launcher.name if launcher.provides.eof_teardown_only else None
        choice = chosen.isolation(choose_level(cfg.isolation, remote_launcher=remote), cfg)
        if choice.level == "sandbox":
            protects = probe_host().root and launcher.name == "local"
            problem = workspace_problem(str(ws), protects_code=protects)
            if problem is not None:
                raise ValueError(problem)
        self._warn_once(choice)
        models = await resolve_models(model, request.agent)
        params = AgentRunParams(
            run_id=request.run_id,
            prompt=request.prompt,
            agent=request.agent,
            description=request.description,
            workspace=request.workspace,
            history=list(request.history),
            parent_tools=list(request.parent_tools),
            continuable=continuation is not None,
        )
        size = len(encode_request(0, AGENT_RUN.name, params)) - 1
        if size > DEFAULT_MAX_MESSAGE_BYTES:
            raise ValueError(
                f"the run's request is {size} bytes, more than a child reads in one message "
                f"({DEFAULT_MAX_MESSAGE_BYTES}); put large inputs in the workspace instead"
            )
        if continuation is not None and chosen.drives_itself:
            raise ValueError(
                f"provider {chosen.name!r} runs its agent once; only tether's own runtime keeps "
                "a run for follow-ups (use spawn or fork for a continuable run)"
            )
        if not chosen.drives_itself or isinstance(chosen, InProcessProvider):
            # A provider that drives its own agent may need no model of ours.
            check_model(cfg.command, request.agent, models.main is not None)
        warn_idle(cfg.command, limits or Limits())
        handle = RunHandle(
            self,
            params,
            cfg,
            limits or Limits(),
            tier,
            models,
            approve,
            on_event,
            parent_tools,
            on_turn,
            continuation,
            choice,
            ProviderBody(chosen, request) if chosen.drives_itself else None,
        )
        self._handles.add(handle)
        self._tg.start_soon(self._execute, handle)
        return handle

    async def _execute(self, handle: RunHandle) -> None:
        try:
            await handle.execute()
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
                await handle.wait()
            raise

    async def orchestrate(self, prompt: str, **kwargs: Any) -> Orchestration:
        """Run an orchestrator on `prompt`: a child whose model delegates to sub-agents (each a
        child of this supervisor) through the `task` tool; see
        `tether.parent.delegation.orchestrator.orchestrate` for the arguments (`model=` is
        required). Returns the orchestrator's result, every task call and the usage ledger."""
        from tether.parent.delegation.orchestrator import orchestrate

        return await orchestrate(self, prompt, **kwargs)

    # --- continuable agents (see agents.py) ---------------------------------------------------

    @property
    def agents(self) -> Agents:
        """This supervisor's continuable agents and their session store."""
        if self._agents is None:
            if self._tg is None:
                raise RuntimeError("use the Supervisor as `async with Supervisor() as sup:`")
            from tether.parent.agents.service import Agents

            self._agents = Agents(self, self._tg, self._state_dir)
        return self._agents

    async def spawn_agent(self, prompt: str, **kwargs: Any) -> AgentHandle:
        """Start a continuable agent: a durable session and its first child, kept alive for
        `keep_alive` after each answer (`Agents.spawn`). `await handle.result()` for its
        first answer; `handle.id` for `send_message`."""
        return await self.agents.spawn(prompt, **kwargs)

    async def send_message(self, agent_id: str, message: str, **kwargs: Any) -> RunResult:
        """Continue an agent, warm in its live child or cold from its stored transcript
        (`Agents.send`)."""
        return await self.agents.send(agent_id, message, **kwargs)

    async def list_agents(self, **kwargs: Any) -> list[AgentSummary]:
        """The stored agents, most recently updated first (`Agents.list`)."""
        return await self.agents.list(**kwargs)

    async def gateway(self) -> Gateway:
        """The model gateway foreign agents of this supervisor call with their capability
        tokens; started on first use, closed when the supervisor closes."""
        if self._tg is None:
            raise RuntimeError("use the Supervisor as `async with Supervisor() as sup:`")
        return await self._gateway.get(self._tg)

    # --- children: registration, spawners -----------------------------------------------------

    def register(self, child: SupervisedProcess) -> None:
        """A child is alive: the keeper and the interpreter-exit hook know it from now on."""
        self._live[child.pid] = child
        if self._keeper is not None:
            self._keeper.watch(child.pid, child.cgroup.procs_files if child.cgroup else ())

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
        if cfg.spawner == "zygote":
            await self._zygote_ready()
            return self._zygote_fork
        if self._zygote_failed is not None:
            return AutoSpawner(None, self._zygote_failed)
        try:
            await self._zygote_ready()
        except SpawnError as exc:
            # Not tried again by this supervisor: every later run would wait for it to fail.
            self._zygote_failed = f"the zygote could not start: {exc}"
            return AutoSpawner(None, self._zygote_failed)
        return AutoSpawner(self._zygote_fork)

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
            keeper = self._keeper
            if keeper is not None:
                keeper.watch(zygote.pid)
                # Each cgroup made for its standby too: if this supervisor dies, the keeper
                # kills what is in it and removes it (the child's own is watched as the child's).
                zygote.on_standby_cgroup = lambda procs: keeper.watch(zygote.pid, procs)
            return zygote

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

    # --- events -----------------------------------------------------------------------------

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call `callback` for every event; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    @contextlib.asynccontextmanager
    async def events(self, buffer: int = DEFAULT_EVENT_BUFFER) -> AsyncIterator[EventStream]:
        """`async with sup.events() as stream: async for ev in stream: ...`. The stream buffers
        up to `buffer` events the consumer has not read; past that the oldest progress events
        are dropped and counted (`stream.dropped`), never a run's start or end."""
        stream = EventStream(buffer)
        unsubscribe = self.subscribe(stream.put)
        try:
            yield stream
        finally:
            unsubscribe()
            stream.close()

    def publish(self, event: Event, extra: EventCallback | None = None) -> None:
        """Hand `event` to the run's own callback and to every subscriber."""
        if extra is not None:
            try:
                extra(event)
            except Exception:  # a listener's bug must not break the run
                pass
        if self._subscribers:
            for cb in tuple(self._subscribers):  # a callback may unsubscribe
                try:
                    cb(event)
                except Exception:
                    pass

    # --- interpreter exit -------------------------------------------------------------------

    def _kill_all_now(self) -> None:
        for child in list(self._live.values()):
            child.kill_now()
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


_registry: weakref.WeakSet[Supervisor] = weakref.WeakSet()


@atexit.register
def _dispose_at_exit() -> None:
    for sup in list(_registry):
        sup._kill_all_now()


__all__ = ["ChildConfig", "PoolSpec", "RunHandle", "Supervisor", "host"]
