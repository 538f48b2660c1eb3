"""The parent's handle on one live child: process, wire endpoint, stderr ring, dispose ladder.

Theory of operation
-------------------
`LiveChild.open()` spawns the process; the caller runs its three background jobs in a task
group it owns: the stdout reader (`read_stdout`, the JSON-RPC endpoint), the stderr drain into
a bounded ring (`drain_stderr`), and the exit watch (`watch_exit`). Everything the supervisor
notices lands in one `Observed` record, which `classify` later turns into a result.

The exit watch is what makes a dead child's pending requests fail at once even when a
grandchild inherited its stdout and holds the pipe open (so no EOF ever comes): once the pidfd
says the child exited, whatever it wrote is already in the pipe; the reader takes it, and then
our read end is closed, which the reader sees as end of stream.

`dispose()` is the only way a child ends, on every path, and it is bounded and shielded from
cancellation. Each rung runs only if the child is still alive after the previous one, and the
last rung attempted is recorded:

    shutdown  request `shutdown`, then `exit`, close stdin      (polite; skipped if the wire broke)
    exit      `exit` notification, close stdin: the EOF lifeline (any well-behaved child)
    sigterm   SIGTERM + SIGCONT to the whole tree                (stopped processes wake to die)
    sigkill   SIGKILL to the whole tree

Then, whatever rung was reached: everything left of the tree (grandchildren that outlived the
child, daemons that left its session) is SIGKILLed and the sweep repeats until nothing of the
tree is alive or the kill grace runs out; then the pipes are closed. A grandchild that holds
the child's stdout never delays any of this, because exit is seen through the pidfd, not EOF.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import psutil

from tether.parent.cgroups import ChildCgroup
from tether.parent.classify import Observed
from tether.parent.endpoint import (
    ConnectionClosed,
    Endpoint,
    NotificationHandler,
    RequestHandler,
)
from tether.parent.env import TREE_ENV
from tether.parent.limits import DisposePolicy
from tether.parent.process import EXEC_FAILED_MARKER, ChildProcess, SpawnSpec
from tether.parent.ring import ByteRing
from tether.parent.tree import signal_procs, tree_procs
from tether.protocol import RemoteError
from tether.protocol.messages import Rung

EXIT_DRAIN_SECONDS = 0.5
"""After the child exits, how long its unread output may take to be read before the stream is
ended anyway (only a grandchild that keeps writing into the inherited pipe can use it up)."""

log = logging.getLogger("tether.parent")
_tree_ids = itertools.count(1)


def new_tree_marker() -> str:
    """A marker unique to one child; its prefix is this supervisor's pid."""
    return f"{os.getpid()}-{os.urandom(3).hex()}-{next(_tree_ids)}"


@dataclass
class DisposeReport:
    rung: Rung
    seconds: float
    survivors: list[int] = field(default_factory=list)


class LiveChild:
    def __init__(
        self,
        proc: ChildProcess,
        marker: str,
        *,
        cgroup: ChildCgroup | None = None,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        max_message_bytes: int,
        ring_bytes: int,
    ) -> None:
        self.proc = proc
        self.marker = marker
        self.cgroup = cgroup
        self.observed = Observed()
        self.stderr = ByteRing(ring_bytes)
        self.endpoint = Endpoint(
            proc.stdout,
            proc.stdin,
            on_request=on_request,
            on_notification=on_notification,
            max_message_bytes=max_message_bytes,
        )
        self.stderr_done = anyio.Event()
        self.disposed: DisposeReport | None = None
        self.cleanup: Callable[[], None] | None = None
        """Runs at the end of `dispose()` (a sandbox's private directory is removed)."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def open(
        cls,
        spec: SpawnSpec,
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        max_message_bytes: int,
        ring_bytes: int,
        cgroup: ChildCgroup | None = None,
        launch: Callable[[dict[str, str], list[str]], list[str]] | None = None,
        spawn: Callable[[SpawnSpec], ChildProcess] | None = None,
        cleanup: Callable[[], None] | None = None,
    ) -> LiveChild:
        """Spawn the child (into `cgroup`, when given); raises `SpawnError` when it cannot
        start. `launch`, given the child's final environment and `spec.argv`, returns the argv
        to exec instead (a launcher's prefix around it). `spawn` starts the process instead of
        `ChildProcess.spawn` (the zygote's fork), from the same spec: environment with the tree
        marker, rlimits, cgroup files, isolation plan. `cleanup` runs once the child is
        disposed (or could not be spawned)."""
        marker = new_tree_marker()
        env = dict(spec.env)
        env[TREE_ENV] = marker
        try:
            proc = (spawn or ChildProcess.spawn)(
                dataclasses.replace(
                    spec,
                    argv=launch(env, spec.argv) if launch is not None else spec.argv,
                    env=env,
                    cgroup_procs=cgroup.procs_files if cgroup else [],
                )
            )
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            if cleanup is not None:
                cleanup()
            raise
        child = cls(
            proc,
            marker,
            cgroup=cgroup,
            on_request=on_request,
            on_notification=on_notification,
            max_message_bytes=max_message_bytes,
            ring_bytes=ring_bytes,
        )
        child.cleanup = cleanup
        return child

    # --- background jobs ----------------------------------------------------------------------

    async def read_stdout(self, tg: anyio.abc.TaskGroup) -> None:
        end = await self.endpoint.run_reader(tg)
        if end.oversize:
            self.observed.oversize = end.oversize
        elif end.fault:
            self.observed.protocol_error = end.fault
        if end.truncated:
            self.observed.truncated = True

    async def watch_exit(self) -> None:
        """When the child exits, end its output stream even if another process holds it open."""
        await self.proc.wait()
        out = self.proc.stdout
        # Everything the child wrote before it exited is in the pipe now: let the reader take
        # it (it routes each chunk as soon as it reads it). Bounded, because a grandchild may
        # keep writing into the pipe it inherited.
        with anyio.move_on_after(EXIT_DRAIN_SECONDS):
            while out.unread() > 0 and self.endpoint.end is None:
                with anyio.move_on_after(0.002):
                    await self.endpoint.ended.wait()
        if self.endpoint.end is None:
            out.close()  # the reader wakes to end-of-stream and fails every pending request

    async def drain_stderr(self) -> None:
        try:
            while True:
                data = await self.proc.stderr.read()
                if not data:
                    return
                self.stderr.write(data)
        finally:
            self.stderr_done.set()

    def spawn_failure(self) -> str | None:
        """The trampoline's exec-failure line, if the command could not be executed."""
        tail = self.stderr.tail(2000)
        for line in tail.splitlines():
            if line.startswith(EXEC_FAILED_MARKER):
                return line[len(EXEC_FAILED_MARKER) :].strip()
        return None

    # --- requests -----------------------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        return await self.endpoint.request(method, params)

    async def notify(self, method: str, params: Any = None) -> None:
        await self.endpoint.notify(method, params)

    # --- teardown -----------------------------------------------------------------------------

    async def dispose(self, policy: DisposePolicy, *, polite: bool = True) -> DisposeReport:
        """Take the child and its whole tree down; see the module docstring for the ladder."""
        if self.disposed is not None:
            return self.disposed
        started = time.monotonic()
        with anyio.CancelScope(shield=True):
            rung = await self._climb(policy, polite)
            survivors = await self._sweep(policy.kill)
            status = self.proc.reap()
            await self._settle_stderr()
            self.proc.close_pipes()
            if self.cgroup is not None:
                self.observed.oom_kills = self.cgroup.oom_kills()
                self.observed.pids_max_hits = self.cgroup.pids_max_hits()
                if not self.cgroup.remove():
                    survivors = sorted(set(survivors) | self.cgroup.members())
            cleanup, self.cleanup = self.cleanup, None
            if cleanup is not None:
                cleanup()
        if self.proc.lost is not None:
            self.observed.lost = self.proc.lost
        if status is not None:
            self.observed.exit_code = status.exit_code
            self.observed.signal = status.signal
            self.observed.cpu_seconds = status.cpu_seconds
        self.observed.rung = rung
        self.observed.stderr_tail = self.stderr.tail()
        self.observed.survivors = survivors
        if survivors:
            log.warning(
                "child %d: %d process(es) of its tree survived teardown: %s",
                self.pid,
                len(survivors),
                survivors,
            )
        self.disposed = DisposeReport(rung, time.monotonic() - started, survivors)
        return self.disposed

    def _alive(self) -> bool:
        return not self.proc.exited()

    async def _climb(self, policy: DisposePolicy, polite: bool) -> Rung:
        rung: Rung = "none"
        ep = self.endpoint
        if ep.end is not None:
            # Output closed: the child is probably exiting right now (the kernel closes its
            # files just before it reports the exit). Don't count that as a rung we needed.
            await self.proc.wait_for(0.05)
        if not self._alive():
            return rung
        if polite and ep.end is None:
            rung = "shutdown"
            with anyio.move_on_after(policy.shutdown):
                try:
                    await ep.request("shutdown")
                    await ep.notify("exit")
                except (ConnectionClosed, RemoteError):
                    pass
                self.proc.stdin.close()
                await self.proc.wait()
            if not self._alive():
                return rung
        rung = "exit"
        with anyio.move_on_after(policy.eof):
            if ep.end is None and not self.proc.stdin.closed:
                with anyio.move_on_after(min(0.05, policy.eof)):
                    try:
                        await ep.notify("exit")
                    except ConnectionClosed:
                        pass
            self.proc.stdin.close()
            await self.proc.wait()
        if not self._alive():
            return rung
        rung = "sigterm"
        self._signal_tree(signal.SIGTERM)
        if await self.proc.wait_for(policy.term):
            return rung
        rung = "sigkill"
        self._signal_tree(signal.SIGKILL)
        await self.proc.wait_for(policy.kill)
        return rung

    def _members(self) -> set[int]:
        return self.cgroup.members() if self.cgroup is not None else set()

    def _signal_tree(self, sig: int) -> None:
        if sig == signal.SIGKILL and self.cgroup is not None:
            self.cgroup.kill()
        self.proc.signal_group(sig)
        if sig == signal.SIGTERM:
            self.proc.signal_group(signal.SIGCONT)
        procs = tree_procs(self.pid, self.marker, thorough=True, members=self._members())
        # The child itself is signalled through its pidfd, the rest by verified psutil handles.
        self.proc.send_signal(sig)
        if sig == signal.SIGTERM:
            self.proc.send_signal(signal.SIGCONT)
        signal_procs([p for p in procs if p.pid != self.pid], sig)

    async def _sweep(self, grace: float) -> list[int]:
        """SIGKILL whatever is left of the tree until none of it is alive, or grace runs out."""
        deadline = time.monotonic() + grace
        delay = 0.002
        while True:
            members = self._members()
            # Once the child has exited (it is a zombie until `reap`), its children have been
            # reparented: the walk by parentage would find nothing, so it is skipped.
            gone = not self._alive()
            left = [
                p
                for p in tree_procs(self.pid, self.marker, members=members, root_exited=gone)
                if p.pid != self.pid
            ]
            if not left:
                return []
            if self.cgroup is not None:
                self.cgroup.kill()
            self.proc.signal_group(signal.SIGKILL)
            signal_procs(left, signal.SIGKILL)
            if time.monotonic() >= deadline:
                return [p.pid for p in left if _alive(p)]
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def _settle_stderr(self) -> None:
        # Give the drain a moment to read what the dead child left in the pipe, so the tail
        # shows its last words; a grandchild holding stderr open cannot make us wait longer.
        with anyio.move_on_after(0.05):
            await self.stderr_done.wait()


def _alive(p: psutil.Process) -> bool:
    try:
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
