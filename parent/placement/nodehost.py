"""The host on one node: the unchanged local `Supervisor`, run inside an engine actor.

Theory of operation
-------------------
`NodeHost` is the body of an async Ray actor pinned to one node (the driver makes it one with
`ray.remote`). Every method runs on the actor's one event loop thread, which also spawns every
child, so the children's PR_SET_PDEATHSIG is tied to a thread that lives as long as the host.

- On start it puts `SIGCHLD` back to its default. Ray's (deprecated) subreaper mode sets it to
  SIG_IGN in its workers; under SIG_IGN the kernel reaps children itself and a wait never sees
  how they died: a child killed by SIGABRT would read as exit 0.
- `serve()` is called once by the driver and lasts as long as the host: it holds the local
  `Supervisor` context (anyio scopes must be entered and left by one task) until `shutdown()`
  asks it to leave. Leaving is the local supervisor's own exit: every run still going is
  aborted and every child taken down through the dispose ladder, on this node, before the
  engine does anything; `shutdown()` then returns what happened to each child, rung included.
  The driver ends the actor only after that, with `ray.kill` as the backstop.
- `run()` is an async generator: it starts one run in the local supervisor and yields its
  events in batches (whatever has piled up since the last batch, up to `batch`), the run's
  `RunFinished` last. A consumer that goes away (the driver cancelled the stream, or died)
  aborts the run; its child is still disposed by the local supervisor's task group.
- Model calls, approvals and parent tools are asked of the driver on the run's own stream: the
  request (`Ask`) goes out in the run's next batch, and the driver answers it by calling the
  host's `answer()` (`DriverAsks`; the driver's side is `relay.py`). Two hops of the engine per
  request, and the node resolves no model and holds no key.
- It watches its node's raylet: when the raylet dies the node is lost to the engine, but this
  process may live on, unreachable; so the host takes its children down the ladder itself and
  exits.
- Children run under the placement's launcher, by default in a PID namespace of their own
  (`_pidns.py`), so a host that dies without its ladder (SIGKILLed worker, dead raylet, dead
  driver) still leaves nothing behind: the kernel ends the namespace. tether's own child is
  forked by the host's zygote, which the local supervisor starts under that launcher's shim
  (`Zygote.launch(contained=True)`): one namespace for the zygote and every child it forks.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anyio
import psutil

from tether.parent.placement.lost import lost_result, node_label
from tether.parent.placement.relay import forwarding_error
from tether.parent.placement.wire import (
    Answer,
    Ask,
    DisposedRun,
    HostInfo,
    HostReport,
    NodeRun,
    Refused,
)
from tether.parent.process.config import ChildConfig
from tether.parent.run.broker import Brokered, ParentTool
from tether.parent.run.events import ChildEvent, Event, RunFinished, RunStarted
from tether.parent.run.handle import RunHandle
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import (
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolApproveParams,
    ToolApproveResult,
    ToolCallParams,
    ToolCallResult,
)

Batch = list[Event | Refused | Ask]
RAYLET_POLL = 0.2
"""How often a host checks that its node's raylet is alive, without a pidfd (seconds)."""
CUT_EARLY_KEPT = 4096
RAYLET_FLUSH = 0.5
"""After its raylet died and its children are down, how long a host lets its runs' last
events go out before it exits."""


def reset_sigchld() -> bool:
    """Put SIGCHLD back to SIG_DFL for this whole process; return whether it was ignored.

    Through libc, because the actor's code does not run on the main thread (Python's `signal`
    refuses) and the engine set the disposition below Python anyway."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    old = libc.signal(int(signal.SIGCHLD), int(signal.SIG_DFL))
    return bool(old == int(signal.SIG_IGN))


class EventBatcher:
    """One run's events waiting for the driver, bounded like `EventStream`: past `buffer`,
    the oldest progress events are dropped (never a run's start or end, nor a request)."""

    def __init__(self, batch: int, buffer: int) -> None:
        self._batch = batch
        self._buffer = buffer
        self._queue: deque[Event | Refused | Ask] = deque()
        self._wake: anyio.Event | None = None
        self.dropped = 0
        self.finished = False

    def put(self, event: Event | Refused | Ask) -> None:
        self._queue.append(event)
        if len(self._queue) > self._buffer:
            for i, queued in enumerate(self._queue):
                if isinstance(queued, ChildEvent):
                    del self._queue[i]
                    self.dropped += 1
                    break
        if self._wake is not None:
            self._wake.set()

    async def next_batch(self) -> Batch:
        while not self._queue:
            self._wake = anyio.Event()
            await self._wake.wait()
        out: Batch = []
        while self._queue and len(out) < self._batch:
            event = self._queue.popleft()
            out.append(event)
            if isinstance(event, (RunFinished, Refused)):
                self.finished = True
        return out


AskFn = Callable[[str, Any], Awaitable[Answer]]
"""One run's way to ask the driver: `ask(method, params)`."""


class DriverAsks:
    """The requests of this host's runs that wait for the driver's answer.

    `ask()` puts the request in its run's batches, so it reaches the driver on the stream the
    driver already reads, and waits; the driver's `answer()` call wakes it. A request whose
    asker was cancelled is forgotten, and a late or unknown answer is dropped."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._waiting: dict[int, list[Any]] = {}

    def for_run(self, events: EventBatcher, run_id: str) -> AskFn:
        async def ask(method: str, params: Any) -> Answer:
            request = Ask(next(self._ids), run_id, method, params)
            slot: list[Any] = [anyio.Event(), None]
            self._waiting[request.id] = slot
            try:
                events.put(request)
                await slot[0].wait()
                answer: Answer = slot[1]
                return answer
            finally:
                self._waiting.pop(request.id, None)

        return ask

    def answer(self, answers: Sequence[Answer]) -> None:
        for answer in answers:
            slot = self._waiting.get(answer.id)
            if slot is not None:
                slot[1] = answer
                slot[0].set()

    def waiting(self) -> int:
        return len(self._waiting)


class ForwardedModel:
    """The node's model for one run: every turn is answered by the driver."""

    def __init__(self, ask: AskFn) -> None:
        self._ask = ask

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        answer = await self._ask("model/complete", params)
        error = forwarding_error(answer)
        if error is not None:
            raise error
        result: ModelCompleteResult = answer.result
        return result


def _forwarded_approve(ask: AskFn) -> Any:
    async def approve(params: ToolApproveParams) -> ToolApproveResult:
        answer = await ask("tool/approve", params)
        error = forwarding_error(answer)
        if error is not None:
            return ToolApproveResult(allow=False, reason=f"the driver refused: {error.message}")
        result: ToolApproveResult = answer.result
        return result

    return approve


def _forwarded_tools(ask: AskFn, run: NodeRun) -> list[ParentTool]:
    async def call(params: ToolCallParams) -> ToolCallResult:
        answer = await ask("tool/call", params)
        error = forwarding_error(answer)
        if error is not None:
            return ToolCallResult(content=error.message, is_error=True)
        result: ToolCallResult = answer.result
        return result

    return [ParentTool(spec, call) for spec in run.parent_tools]


class NodeHost:
    """The host actor's body; see the module docstring."""

    def __init__(self, node_id: str, config: ChildConfig, batch: int, buffer: int):
        self._sigchld_was_ignored = reset_sigchld()
        self._node_id = node_id
        self._config = config
        self._asks = DriverAsks()
        self._batch = batch
        self._buffer = buffer
        self._sup: Supervisor | None = None
        self._runs: dict[str, RunHandle] = {}
        self._closing = False
        self._report: list[DisposedRun] = []
        self._pids: dict[str, int] = {}
        self._raylet_gone = False
        self._cut_early: set[str] = set()
        """Runs the driver cancelled before their `run()` call reached this host."""
        self._events: dict[str, anyio.Event] = {}

    def _event(self, name: str) -> anyio.Event:
        # Made on first use, inside the actor's event loop.
        if name not in self._events:
            self._events[name] = anyio.Event()
        return self._events[name]

    async def serve(self) -> None:
        """Hold the local supervisor until `shutdown()`; see the module docstring."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_raylet)
                async with Supervisor(self._config) as sup:
                    self._sup = sup
                    self._event("ready").set()
                    await self._event("stop").wait()
                    self._closing = True
                    # Leaving the context aborts every run and takes each child down the ladder.
                tg.cancel_scope.cancel()
        finally:
            self._sup = None
            self._event("served").set()
        if self._raylet_gone:
            # Let the runs' last batches go out (the driver may still be reachable without
            # the raylet), then end: nothing else will ever ask this host anything.
            await anyio.sleep(RAYLET_FLUSH)
            os._exit(1)

    async def _watch_raylet(self) -> None:
        """When this node's raylet dies, the node is gone for the engine, but this process
        and its children may live on, unreachable. So the host takes its children down the
        ladder itself, and then ends."""
        pid = int(os.environ.get("RAY_RAYLET_PID", "0") or 0)
        if pid <= 0:
            return
        await _exited(pid)
        self._raylet_gone = True
        self._closing = True
        self._event("stop").set()

    async def info(self) -> HostInfo:
        await self._event("ready").wait()
        assert self._sup is not None
        launcher = self._config.launcher
        return HostInfo(
            node_id=self._node_id,
            hostname=socket.gethostname(),
            ip=_node_ip(),
            pid=os.getpid(),
            tier=self._sup.host.tier,
            launcher=launcher if isinstance(launcher, str) else launcher.name,
            sigchld_was_ignored=self._sigchld_was_ignored,
        )

    async def ping(self) -> bool:
        return True

    async def answer(self, answers: Sequence[Answer]) -> None:
        """Called by the driver: its answers to requests of this host's runs."""
        self._asks.answer(answers)

    async def run(self, spec: NodeRun) -> AsyncIterator[Batch]:
        """Run one child here; yield its events in batches, `RunFinished` (or `Refused`) last."""
        await self._event("ready").wait()
        sup = self._sup
        if sup is None or self._closing:
            yield [Refused(spec.run_id, f"the host on node {self._node_id} is closing")]
            return
        events = EventBatcher(self._batch, self._buffer)
        ask = self._asks.for_run(events, spec.run_id)
        try:
            handle = await sup.start(
                spec.prompt,
                agent=spec.agent,
                workspace=spec.workspace,
                model=ForwardedModel(ask) if spec.models else None,
                limits=spec.limits,
                description=spec.description,
                approve=_forwarded_approve(ask) if spec.approvals else None,
                on_event=self._observe(events),
                config=spec.config,
                run_id=spec.run_id,
                parent_tools=_forwarded_tools(ask, spec),
                history=spec.history,
            )
        except ValueError as exc:
            yield [Refused(spec.run_id, f"on node {self._node_id}: {exc}")]
            return
        self._runs[spec.run_id] = handle
        if spec.run_id in self._cut_early:
            handle.abort()  # aborted by the driver before it got here
        try:
            while not events.finished:
                yield await events.next_batch()
        finally:
            # The consumer went away early (cancelled, or gone): cut the run. Its child is
            # disposed by the supervisor's own task group whatever happens to this task.
            handle.abort()
            self._runs.pop(spec.run_id, None)
            self._pids.pop(spec.run_id, None)
            self._cut_early.discard(spec.run_id)

    def _observe(self, events: EventBatcher) -> Any:
        def on_event(event: Event) -> None:
            if self._raylet_gone and isinstance(event, RunFinished):
                # The run ended because the node is lost, not because anyone cancelled it.
                event = RunFinished(event.run_id, self._lost(event.result))
            if self._closing and isinstance(event, RunFinished):
                failure = event.result.failure
                self._report.append(
                    DisposedRun(
                        run_id=event.run_id,
                        pid=self._pids.get(event.run_id),
                        kind=failure.kind if failure else None,
                        rung=failure.rung if failure else None,
                        message=event.result.message,
                    )
                )
            elif isinstance(event, RunStarted):
                self._pids[event.run_id] = event.pid
            events.put(event)

        return on_event

    def _lost(self, result: RunResult) -> RunResult:
        failure = result.failure
        return lost_result(
            result.run_id,
            node=node_label(self._node_id, socket.gethostname()),
            why="its raylet died, and its host took the child down itself",
            rung=failure.rung if failure is not None else None,
            containment=result.containment,
            brokered=Brokered(
                turns=result.iteration_count,
                input_tokens=result.usage.input_tokens,
                output_tokens=result.usage.output_tokens,
            ),
            started=True,
        )

    async def cancel(self, run_id: str, reason: str) -> None:
        """Ask the run's child to abort (the local `cancel`: a grace, then the ladder)."""
        handle = self._runs.get(run_id)
        if handle is not None:
            await handle.cancel(reason)
        else:
            self._cut_before_start(run_id)  # not started here yet: it never will be

    async def abort(self, run_id: str) -> None:
        handle = self._runs.get(run_id)
        if handle is not None:
            handle.abort()
        else:
            self._cut_before_start(run_id)

    def _cut_before_start(self, run_id: str) -> None:
        # Bounded: an abort that crossed its run's end on the way leaves an id nobody takes.
        if len(self._cut_early) >= CUT_EARLY_KEPT:
            self._cut_early.clear()
        self._cut_early.add(run_id)

    async def shutdown(self) -> HostReport:
        """Take every child down through the ladder, here, and say how it went."""
        started = time.monotonic()
        self._closing = True
        self._event("stop").set()
        await self._event("served").wait()
        return HostReport(self._node_id, time.monotonic() - started, list(self._report))


async def _exited(pid: int) -> None:
    """Return when process `pid` (not our child) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        fd = None
    if fd is not None:
        try:
            await anyio.wait_readable(fd)
        finally:
            os.close(fd)
        return
    while True:  # no pidfd: poll
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        await anyio.sleep(RAYLET_POLL)


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:
        return ""
