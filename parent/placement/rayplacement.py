"""`RayPlacement`: the supervisor's `run()` / `start()` / `events()`, with each child placed on a
node of a Ray cluster.

Theory of operation
-------------------
`async with RayPlacement(config, nodes=..., per_node=...) as sup:` connects to the cluster (the
one `ray.init` already joined, or `address=`), starts one `NodeHost` actor pinned to each
selected node, and waits until every host's local supervisor is serving. Those actors are owned
by this driver: if it dies, the engine ends them, and the kernel ends their children (see
`nodehost.py`).

`start()` checks the request as the local supervisor does (bad usage raises `ValueError` before
anything is placed), resolves the run's models *here*, and runs the rest of the run in a task of
the placement's group (`RemoteRun`): wait for a slot (`policy.Placer`), stream the run from its
node's host (`NodeHost.run`, batches of events through an actor generator), publish each event
exactly as the local supervisor would, answer each request the run's child made of the driver
that comes in the stream (`Ask`: a model turn, an approval, a parent tool; `relay.DriverBroker`,
in a task of the placement's group, the answer handed to the host's `answer()`), and resolve to
the node's `RunResult`. Whatever the engine does instead of answering — the host actor killed,
its worker or raylet gone, the stream cancelled — becomes a result (`placement_lost`, naming the
node and the last dispose rung the node reported), never an exception in the driver; what raises
in the driver's own code is `parent_error`, logged with its traceback.

A watchdog pings every host: a host the engine reports dead, or that the engine keeps failing
to reach for `lost_after` seconds, is lost (a host that is merely slow to answer is not). Its
runs end `placement_lost` at once, the node leaves the rotation, and `ray.kill` makes sure the
actor never comes back.

Leaving the context aborts every run, then asks each host to take its children down through
the ladder on its node (`NodeHost.shutdown`, which reports the rung each one needed: the
reports are in `closed`); only then are the actors ended (`__ray_terminate__`), with
`ray.kill` as the backstop for a host that does not go.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import anyio
import msgspec
from anyio.abc import TaskGroup

from tether.parent.placement.lost import (
    engine_failure,
    lost_result,
    node_label,
    unplaced_result,
)
from tether.parent.placement.policy import (
    NodeSelection,
    NodesFull,
    NoNodeLeft,
    Placer,
    WhenFull,
    select_nodes,
)
from tether.parent.placement.relay import DriverBroker, RunContext
from tether.parent.placement.wire import Answer, Ask, HostInfo, HostReport, NodeRun, Refused
from tether.parent.process.config import ChildConfig
from tether.parent.process.launchers import Bwrap, Launcher, Local, Pidns, resolve_launcher
from tether.parent.process.limits import Limits
from tether.parent.run.broker import resolve_models
from tether.parent.run.events import (
    DEFAULT_EVENT_BUFFER,
    ChildEvent,
    Event,
    EventBus,
    EventCallback,
    RunFinished,
    RunStarted,
)
from tether.parent.run.plan import check_agent, check_config
from tether.parent.run.results import parent_error
from tether.parent.run.spec import NamedModel, RunSpec, spec_of
from tether.protocol import ErrorCode
from tether.protocol.messages import AgentDefinition, RunResult

log = logging.getLogger("tether.parent")
Contain = Literal["pidns", "none"]

ACTOR_EXIT_GRACE = 5.0
"""How long an actor asked to exit may take before `ray.kill` ends it."""
CONTROL_CALLS = 16
"""Calls a host serves beside its runs (serve, info, ping, cancel, abort, shutdown)."""
ANSWERS_PER_RUN = 2
"""The driver's answers a host takes at once per run slot (a run's child asks one thing at a
time, save a parent tool called while a turn is asked)."""
_run_ids = itertools.count(1)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            "RayPlacement needs Ray: install tether with the ray extra (pip install 'tether[ray]')"
        ) from None
    return ray


@dataclass
class _Host:
    node_id: str
    actor: Any
    info: HostInfo | None = None
    serving: Any = None
    runs: set[RemoteRun] = field(default_factory=set)
    unreachable_since: float | None = None
    pinging: bool = False
    lost: str | None = None

    @property
    def label(self) -> str:
        return node_label(self.node_id, self.info.hostname if self.info else "")


class RemoteRun:
    """One run placed on a node. Await `result()`; `cancel()` asks its child to abort."""

    def __init__(self, placement: RayPlacement, spec: NodeRun, ctx: RunContext) -> None:
        self.run_id = spec.run_id
        self._placement = placement
        self._spec = spec
        self._ctx = ctx
        self.node: str | None = None
        """The id of the node the run was placed on (once placed)."""
        self.pid: int | None = None
        """The child's pid on its node (once it started)."""
        self.containment: str | None = None
        self._host: _Host | None = None
        self._done = anyio.Event()
        self._result: RunResult | None = None
        self._waiting = anyio.CancelScope()
        self._streaming = anyio.CancelScope()
        self._cut: tuple[str, Literal["placement_lost", "cancelled"]] | None = None
        self._aborted_at: float | None = None

    async def result(self) -> RunResult:
        await self._done.wait()
        assert self._result is not None
        return self._result

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def wait(self) -> None:
        await self._done.wait()

    async def cancel(self, reason: str = "cancelled by the parent") -> RunResult:
        """Ask the child to abort, on its node (the local `cancel`); cut it if the node does
        not answer within the grace."""
        host = self._host
        if not self.done and host is not None:
            grace = self._spec.config.cancel_grace + 5.0
            with anyio.move_on_after(grace), contextlib.suppress(Exception):
                await host.actor.cancel.remote(self.run_id, reason)
            with anyio.move_on_after(grace):
                await self._done.wait()
        if not self.done:
            self.abort()
        return await self.result()

    def abort(self) -> None:
        """Cut the run now (no grace): on its node the child goes down the ladder at once."""
        if self.done or self._aborted_at is not None:
            return
        self._aborted_at = time.monotonic()
        host = self._host
        if host is None:
            self._waiting.cancel()
            return
        with contextlib.suppress(Exception):
            host.actor.abort.remote(self.run_id)
        self._placement._backstop(self)

    def _lose(self, why: str, kind: Literal["placement_lost", "cancelled"]) -> None:
        if self._cut is None:
            self._cut = (why, kind)
        self._streaming.cancel()


class RayPlacement(EventBus):
    """Children placed on the nodes of a Ray cluster, with the local supervisor's surface.

    `nodes`: `"all"` alive nodes, a list of node ids, or labels every chosen node carries.
    `per_node`: runs at once per node. `when_full`: `"queue"` (wait for a slot, in order) or
    `"fail"` (end at once, `spawn_failed`). `contain`: `"pidns"` (default) runs each child in
    a PID namespace of its own on top of the node's containment tier; `"none"` uses the
    config's launcher as is. `runtime_env`: the Ray runtime environment of the host actors
    (how tether reaches the nodes). `lost_after`: seconds a host may stay unreachable before
    its runs are lost (a host that answers slowly is never lost for it)."""

    def __init__(
        self,
        config: ChildConfig | None = None,
        *,
        nodes: NodeSelection = "all",
        per_node: int = 16,
        when_full: WhenFull = "queue",
        contain: Contain = "pidns",
        runtime_env: Mapping[str, Any] | None = None,
        address: str | None = None,
        event_batch: int = 100,
        event_buffer: int = DEFAULT_EVENT_BUFFER,
        start_timeout: float = 60.0,
        close_timeout: float = 30.0,
        watch_interval: float = 1.0,
        lost_after: float = 10.0,
    ) -> None:
        if per_node < 1:
            raise ValueError("per_node must be at least 1")
        if when_full not in ("queue", "fail"):
            raise ValueError(f"when_full must be 'queue' or 'fail', not {when_full!r}")
        if contain not in ("pidns", "none"):
            raise ValueError(f"contain must be 'pidns' or 'none', not {contain!r}")
        self.config = config or ChildConfig()
        self._nodes = nodes
        self.per_node = per_node
        self.when_full: WhenFull = when_full
        self.contain: Contain = contain
        self._runtime_env = dict(runtime_env) if runtime_env else None
        self._address = address
        self._batch = event_batch
        self._buffer = event_buffer
        self._start_timeout = start_timeout
        self._close_timeout = close_timeout
        self._watch_interval = watch_interval
        self._lost_after = lost_after
        super().__init__(event_buffer)
        self._node_config(self.config)  # a launcher the placement cannot stack on is bad usage
        self.hosts: dict[str, _Host] = {}
        self.closed: list[HostReport] = []
        """What each host reported when the placement closed: every child it took down and
        the dispose rung that child needed."""
        self._broker = DriverBroker()
        self._placer: Placer | None = None
        self._tg: TaskGroup | None = None
        self._runs: set[RemoteRun] = set()
        self._connected_here = False
        self._closing = False

    # --- the context ------------------------------------------------------------------------

    async def __aenter__(self) -> RayPlacement:
        ray = _ray()
        if not ray.is_initialized():
            if self._address is None:
                raise RuntimeError("connect to a Ray cluster first (ray.init), or pass address=")
            ray.init(address=self._address)
            self._connected_here = True
        try:
            await self._start_actors(ray)
        except BaseException:
            self._kill_actors(ray)
            if self._connected_here:
                ray.shutdown()
            raise
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._watch)
        return self

    async def _start_actors(self, ray: Any) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from tether.parent.placement.nodehost import NodeHost

        chosen = select_nodes(self._nodes, ray.nodes())
        host_class = ray.remote(NodeHost)
        node_config = self._node_config(self.config)
        for node_id in chosen:
            actor = host_class.options(
                num_cpus=0,
                max_concurrency=self.per_node * (1 + ANSWERS_PER_RUN) + CONTROL_CALLS,
                max_restarts=0,
                max_task_retries=0,
                runtime_env=self._runtime_env,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(node_id, node_config, self._batch, self._buffer)
            host = _Host(node_id, actor)
            host.serving = actor.serve.remote()
            self.hosts[node_id] = host
        with anyio.fail_after(self._start_timeout):
            for host in self.hosts.values():
                host.info = await host.actor.info.remote()
        self._placer = Placer(chosen, self.per_node, self.when_full)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        ray = _ray()
        assert self._tg is not None
        with anyio.CancelScope(shield=True):
            self._closing = True
            for run in list(self._runs):
                # A run on a live node is taken down by its host's `shutdown`, which reports
                # its rung: an abort sent ahead of it could end the run before the host knows
                # it is closing, and the run would be missing from the host's report.
                if run._host is None or run._host.lost is not None:
                    run.abort()
            async with anyio.create_task_group() as tg:
                for host in self.hosts.values():
                    if host.lost is None:
                        tg.start_soon(self._close_host, host)
            with anyio.move_on_after(self._close_timeout):
                for run in list(self._runs):
                    await run.wait()
            for run in list(self._runs):
                run._lose("the placement closed before its node answered", "cancelled")
            with anyio.move_on_after(5.0):
                for run in list(self._runs):
                    await run.wait()
        # Every run is done: what is left in the group is the pump and the watchdog.
        tg, self._tg = self._tg, None
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                await self._end_actors(ray)
                if self._connected_here:
                    ray.shutdown()
        return None

    async def _close_host(self, host: _Host) -> None:
        """The ladder, on the node, before the engine does anything."""
        ray = _ray()
        with anyio.move_on_after(self._close_timeout):
            try:
                report: HostReport = await host.actor.shutdown.remote()
            except ray.exceptions.RayError:
                return
            self.closed.append(report)

    async def _end_actors(self, ray: Any) -> None:
        """End each actor gracefully; `ray.kill` any that is still there after a grace."""
        actors = [h.actor for h in self.hosts.values() if h.lost is None]
        for actor in actors:
            with contextlib.suppress(Exception):
                actor.__ray_terminate__.remote()

        async def end(actor: Any) -> None:
            gone = False
            with anyio.move_on_after(ACTOR_EXIT_GRACE):
                while not gone:
                    try:
                        with anyio.move_on_after(1.0):
                            await actor.__ray_ready__.remote()
                    except ray.exceptions.RayError:
                        gone = True
                    else:
                        await anyio.sleep(0.05)
            if not gone:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)

        async with anyio.create_task_group() as tg:
            for actor in actors:
                tg.start_soon(end, actor)

    def _kill_actors(self, ray: Any) -> None:
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                ray.kill(host.actor, no_restart=True)

    # --- runs -------------------------------------------------------------------------------

    async def start(self, spec: RunSpec | str | None = None, /, **fields: Any) -> RemoteRun:
        """Start one run on a node and return its handle; the arguments are the local
        supervisor's (a `RunSpec`, or its fields as keywords), checked by the same planning
        step's parts (`run.plan.check_agent`, `check_config`; the rest is planned on the
        node). Raises `ValueError` for bad usage, before anything is placed. The workspace
        must exist on the node (a relative path is made absolute here)."""
        if self._tg is None or self._closing:
            raise RuntimeError("use the placement as `async with RayPlacement(...) as sup:`")
        run = spec_of(spec, fields)
        unplaceable = [
            name
            for name, given in (
                ("provider", run.provider),
                ("fork_from", run.fork_from),
                ("continuation", run.continuation),
                ("budgets", run.budgets),
                # A layer is made and applied on the supervisor's host, not a node's.
                ("workspace_mode='layered'", run.workspace_mode != "shared"),
                ("layer", run.layer),
                ("attempts", run.attempts != 1),
                ("apply", run.apply != "never"),
                ("trace", run.trace),  # its model calls are served here, its child elsewhere
            )
            if given
        ]
        if unplaceable:
            raise ValueError(
                f"a placed run takes no {', '.join(unplaceable)} (it runs tether's own child on "
                "its node, once)"
            )
        definition, impl = check_agent(run)
        cfg = check_config(run, self.config, None)  # a custom agent is set up on the node
        node_cfg = self._node_config(cfg)
        model = run.model
        models = await resolve_models(
            model.provider if isinstance(model, NamedModel) else model,
            definition,
            name=model.name if isinstance(model, NamedModel) else None,
        )
        if impl is not None:
            node_agent: str | AgentDefinition = str(run.agent)
        else:
            node_agent = msgspec.structs.replace(definition, model=None, compaction_model=None)
        parent_tools = run.parent_tools
        node = NodeRun(
            # `p`: never the id of a local supervisor's run in the same process
            run_id=run.run_id or f"run-{os.getpid()}-p{next(_run_ids)}",
            prompt=run.prompt,
            agent=node_agent,
            workspace=os.path.abspath(os.fspath(run.workspace)),
            description=run.description,
            limits=run.limits or Limits(),
            config=node_cfg,
            history=tuple(run.history),
            parent_tools=tuple(t.spec for t in parent_tools),
            models=models.main is not None or models.compaction is not None,
            approvals=run.approve is not None,
        )
        approve, on_turn, on_event = run.approve, run.on_turn, run.on_event
        ctx = RunContext(models, approve, {t.spec.name: t for t in parent_tools}, on_turn)
        placed = RemoteRun(self, node, ctx)
        self._runs.add(placed)
        self._tg.start_soon(self._execute, placed, on_event)
        return placed

    async def run(self, spec: RunSpec | str | None = None, /, **fields: Any) -> RunResult:
        """Run one sub-agent on a node to its end and return its `RunResult`; never raises for
        anything the child or the engine does. If this call is cancelled, the child is taken
        down on its node first."""
        handle = await self.start(spec, **fields)
        try:
            return await handle.result()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                handle.abort()
                await handle.wait()
            raise

    def _node_config(self, cfg: ChildConfig) -> ChildConfig:
        if self.contain == "none":
            return cfg
        launcher = resolve_launcher(cfg.launcher)
        if isinstance(launcher, Bwrap):
            return cfg  # bwrap makes its own PID namespace and dies with its parent
        if isinstance(launcher, Pidns):
            return cfg
        if type(launcher) is not Local:
            raise ValueError(
                f"contain='pidns' stacks on the local or bwrap launcher, not {launcher.name!r}; "
                "pass contain='none' to place children under it as is"
            )
        return _replace_launcher(cfg, "pidns")

    async def _execute(self, run: RemoteRun, on_event: EventCallback | None) -> None:
        assert self._placer is not None
        result: RunResult | None = None
        node: str | None = None
        try:
            with run._waiting:
                try:
                    node = await self._placer.acquire()
                except NodesFull:
                    result = unplaced_result(
                        run.run_id,
                        kind="spawn_failed",
                        message=f"every node is running its {self.per_node} runs "
                        "(when_full='fail')",
                        nodes=[h.label for h in self.hosts.values() if h.lost is None],
                    )
                except NoNodeLeft:
                    result = unplaced_result(
                        run.run_id,
                        kind="placement_lost",
                        message="no node of the placement is left",
                        nodes=[f"{h.label}: {h.lost}" for h in self.hosts.values()],
                    )
            if node is not None and run._aborted_at is not None:
                self._placer.release(node)  # aborted just as it got its slot
                node = None
            if result is None and node is None:
                result = unplaced_result(
                    run.run_id,
                    kind="cancelled",
                    message="the run was cancelled before it was placed",
                )
            if result is None:
                assert node is not None
                result = await self._on_node(run, self.hosts[node], on_event)
        except Exception as exc:  # only a bug of tether's gets here: still a result
            log.error("run %s: the placement failed", run.run_id, exc_info=exc)
            failed = unplaced_result(run.run_id, kind="placement_lost", message="")
            result = parent_error(exc, failed)
        finally:
            if node is not None:
                self._placer.release(node)
            if result is None:  # cancelled from outside: still a result, never a hang
                result = unplaced_result(
                    run.run_id, kind="placement_lost", message="the placement failed"
                )
            run._result = result
            run._done.set()
            self._runs.discard(run)
            self.publish(RunFinished(run.run_id, result), on_event)

    async def _on_node(
        self, run: RemoteRun, host: _Host, on_event: EventCallback | None
    ) -> RunResult:
        ray = _ray()
        run.node = host.node_id
        run.containment = host.info.tier if host.info else None
        run._host = host
        host.runs.add(run)
        self._broker.runs[run.run_id] = run._ctx
        result: RunResult | None = None
        why: str | None = None
        fault: Exception | None = None
        started = False
        gen = None
        try:
            with run._streaming:
                try:
                    gen = host.actor.run.remote(run._spec)
                    async for ref in gen:
                        batch: list[Event | Refused | Ask] = await ref
                        for event in batch:
                            if isinstance(event, Ask):
                                # The run is the stream's, whatever the request names.
                                asked = dataclasses.replace(event, run_id=run.run_id)
                                assert self._tg is not None
                                self._tg.start_soon(self._answer, host, asked)
                            elif isinstance(event, RunFinished):
                                result = event.result
                            elif isinstance(event, Refused):
                                result = unplaced_result(
                                    run.run_id, kind="spawn_failed", message=event.message
                                )
                            elif isinstance(event, RunStarted):
                                run.pid = event.pid
                                started = True
                                self.publish(event, on_event)
                            elif isinstance(event, ChildEvent):
                                self.publish(event, on_event)
                except ray.exceptions.RayError as exc:
                    why = engine_failure(exc)
                    if _host_is_gone(ray, exc):
                        self._lose(host, why)
                except Exception as exc:  # ours, not the engine's: still a result
                    log.error("run %s: the placement failed", run.run_id, exc_info=exc)
                    fault = exc
        finally:
            host.runs.discard(run)
            self._broker.runs.pop(run.run_id, None)
            if result is None and gen is not None:
                with contextlib.suppress(Exception):
                    ray.cancel(gen)  # the backstop: the engine stops the stream too
        if result is not None:
            if result.failure is not None and result.failure.kind == "placement_lost":
                self._lose(host, result.message)  # the host saw its node go (its raylet)
            return result
        kind: Literal["placement_lost", "cancelled"] = "placement_lost"
        if run._cut is not None:
            why, kind = run._cut
        lost = lost_result(
            run.run_id,
            node=host.label,
            why=why or "its host ended the run's stream without a result",
            rung=None,  # the node reported no rung: its report would have been the result
            containment=run.containment,
            brokered=run._ctx.brokered,
            started=started,
            kind=kind,
        )
        if fault is not None and run._cut is None:
            return parent_error(fault, lost)  # tether's own fault, not the engine's
        return lost

    async def _answer(self, host: _Host, ask: Ask) -> None:
        """Answer one request of a run's child, here, and hand the answer to its host."""
        try:
            answer = await self._broker.answer(ask)
        except Exception as exc:  # ours (an `on_turn` hook, say): the child is told, not left
            log.error("run %s: answering its child failed", ask.run_id, exc_info=exc)
            answer = Answer(ask.id, error=(ErrorCode.INTERNAL_ERROR, "the parent failed to answer"))
        try:
            await host.actor.answer.remote([answer])
        except Exception as exc:  # the host is gone: its run ends as a result on its stream
            log.warning("answering run %s failed: %s", ask.run_id, type(exc).__name__)

    def _backstop(self, run: RemoteRun) -> None:
        """An aborted run whose node does not confirm within the ladder's bound is cut."""
        assert self._tg is not None
        policy = run._spec.config.dispose
        bound = policy.shutdown + policy.eof + policy.term + policy.kill + 10.0

        async def cut() -> None:
            with anyio.move_on_after(bound):
                await run.wait()
            if not run.done:
                run._lose("the run was aborted and its node did not confirm in time", "cancelled")

        self._tg.start_soon(cut)

    # --- losing nodes -----------------------------------------------------------------------

    async def _watch(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.sleep(self._watch_interval)
                for host in list(self.hosts.values()):
                    if host.lost is None and not host.pinging:
                        host.pinging = True
                        tg.start_soon(self._ping_once, host)

    async def _ping_once(self, host: _Host) -> None:
        try:
            await self._ping(host)
        finally:
            host.pinging = False

    async def _ping(self, host: _Host) -> None:
        """A host the engine says is dead is lost at once; one the engine cannot reach is lost
        once that has lasted `lost_after`. A slow answer is not a loss: a node busy starting a
        hundred children answers late, and its runs are fine (their clocks run on the node)."""
        ray = _ray()
        now = time.monotonic()
        try:
            await host.actor.ping.remote()
        except ray.exceptions.RayError as exc:
            if _host_is_gone(ray, exc):
                self._lose(host, engine_failure(exc))
                return
        else:
            host.unreachable_since = None
            return
        if host.unreachable_since is None:
            host.unreachable_since = now
        elif time.monotonic() - host.unreachable_since >= self._lost_after:
            self._lose(host, f"its host was unreachable for {self._lost_after:g}s")

    def _lose(self, host: _Host, why: str) -> None:
        if host.lost is not None:
            return
        host.lost = why
        if self._placer is not None:
            self._placer.lose(host.node_id)
        for run in list(host.runs):
            run._lose(why, "placement_lost")
        with contextlib.suppress(Exception):
            _ray().kill(host.actor, no_restart=True)  # never let it come back half-known


def _host_is_gone(ray: Any, exc: BaseException) -> bool:
    """Whether the engine says the host itself is dead (not just this call failing)."""
    names = ("ActorDiedError", "OwnerDiedError", "NodeDiedError")
    gone = tuple(c for c in (getattr(ray.exceptions, n, None) for n in names) if c is not None)
    return isinstance(exc, gone)


def _replace_launcher(cfg: ChildConfig, launcher: str | Launcher) -> ChildConfig:
    import dataclasses

    return dataclasses.replace(cfg, launcher=launcher)
