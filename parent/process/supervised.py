"""The parent's handle on one live child process: process, stderr ring, what was observed, the
dispose ladder — and, for a child that speaks tether's protocol, its endpoint and typed session.

Theory of operation
-------------------
A `SupervisedProcess` is made by `spawning.spawn_child()` (the process already runs) and used
as an async context: `async with child:` runs its background jobs in a task group the child
owns — the stderr drain into a bounded ring and the exit watch, and for a tether child the
reader — and leaving the context disposes of the child, shielded, on every path. That is the
one dispose site; a child lives as long as its context, through any number of runs. Everything
the supervisor notices lands in one `Observed` record, which `classify` later turns into a
result.

Two kinds share it:

- `SupervisedChild` speaks tether's protocol: the reader is the wire `Endpoint`, serving the
  child's requests through whatever handlers are bound at the moment (`serve_with`), and the
  ladder starts with the polite `shutdown` rung;
- a raw `SupervisedProcess` (`spawn_child(..., wire="raw")`) is a foreign agent whose caller
  speaks its protocol over `proc.stdin` / `proc.stdout` itself (the ACP provider); it has no
  `shutdown` request, so its ladder starts at closing stdin. (Asking the agent to stop its
  work, `session/cancel`, is the caller's business before it leaves the context.)

The exit watch is what makes a dead child's output end at once even when a grandchild
inherited its stdout and holds the pipe open (so no EOF ever comes): once the pidfd says the
child exited, whatever it wrote is already in the pipe; the reader (ours or the caller's) takes
it, and then our read end is closed, which the reader sees as end of stream — for a tether
child, every pending request fails at once.

`dispose()` is bounded and shielded from cancellation. Each rung runs only if the child is
still alive after the previous one, and the last rung attempted is recorded:

    shutdown  request `shutdown`, then `exit`, close stdin      (tether children only, and only
                                                               one that is ready, not cut off,
                                                               wire intact)
    exit      (tether: the `exit` notification,) close stdin: the EOF lifeline; its grace
              counts from when stdin closed, so after the shutdown rung closed it only what
              is left of the grace is waited, and after a `shutdown` that went unanswered
              none (EOF is queued behind that request: the wait was spent on that rung)
    sigterm   SIGTERM + SIGCONT to the whole tree                (stopped processes wake to die)
    sigkill   SIGKILL to the whole tree

Then, whatever rung was reached: everything left of the tree (grandchildren that outlived the
child, daemons that left its session) is SIGKILLed and the sweep repeats until nothing of the
tree is alive or the kill grace runs out (a v2 cgroup is killed whole and waited on until it
says it is empty); then the pipes are closed. A grandchild that holds
the child's stdout never delays any of this, because exit is seen through the pidfd, not EOF.

The sweep finds what is left of the tree by its cgroup's membership and, because a process can
leave a cgroup (write its pid into another one's `cgroup.procs`), by scans of all of /proc for
the child's session, process group and tree marker. A child that is `sealed_in_cgroup` cannot
leave: its sandbox, applied before its first instruction, allows no write outside its
workspace and temp directories (cgroupfs included) and refuses `clone3` (no
`CLONE_INTO_CGROUP`); for it, a v2 cgroup that says `populated 0` is the whole answer and the
scans, linear in the host's process count, are skipped. So are they for a child forked by the
zygote whose cgroup holds nobody once it exited, when the zygote, its children's subreaper,
shows that nothing the child started outlived it (`collect_if_alone`: every orphan of its tree
would be the zygote's child; see `tether/child/zygote.py`). A tree that forked anything still
alive gets the scans.

A sandboxed child's mount namespace is held open here from its handshake (or its dispose,
whichever comes first) until its tree is judged, and closed after that in a worker thread:
otherwise its exit, which the verdict waits for, would include the kernel tearing that view
down (`hold_mounts`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import anyio
import anyio.lowlevel
import psutil

from tether.parent.process._keeper import running
from tether.parent.process.cgroups import ChildCgroup
from tether.parent.process.classify import Observed
from tether.parent.process.limits import DisposePolicy
from tether.parent.process.proc import EXEC_FAILED_MARKER, ChildProcess
from tether.parent.process.ring import ByteRing
from tether.parent.process.tree import ProcSnapshot, fresh_snapshot, signal_procs, tree_procs
from tether.parent.process.wired import WiredChild
from tether.protocol.messages import Rung

EXIT_DRAIN_SECONDS = 0.5
"""After the child exits, how long its unread output may take to be read before the stream is
ended anyway (only a grandchild that keeps writing into the inherited pipe can use it up)."""
KILL_SETTLE = 0.05
"""How long a v2 cgroup's members may take to die of `cgroup.kill` before they are killed by
pid as well (see `_sweep`)."""

log = logging.getLogger("tether.parent")


@dataclass
class DisposeReport:
    rung: Rung
    seconds: float
    survivors: list[int] = field(default_factory=list)


class SupervisedProcess:
    """A live child whose caller reads and writes its pipes itself (`wire="raw"`); the base of
    `SupervisedChild`. See the module docstring."""

    def __init__(
        self,
        proc: ChildProcess,
        marker: str,
        *,
        dispose: DisposePolicy,
        cgroup: ChildCgroup | None = None,
        ring_bytes: int,
    ) -> None:
        self.proc = proc
        self.marker = marker
        self.cgroup = cgroup
        self.policy = dispose
        self.observed = Observed()
        """What the supervisor noticed; a caller that keeps its own record may put it here
        before entering the context."""
        self.stderr = ByteRing(ring_bytes)
        self.stderr_done = anyio.Event()
        self.disposed: DisposeReport | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._stdin_closed_at: float | None = None
        self._shutdown_unanswered = False
        """The shutdown rung ran out of grace before the child answered `shutdown`."""
        self.cleanup: Callable[[], None] | None = None
        """Runs at the end of `dispose()` (a sandbox's private directory is removed)."""
        self.on_judged: Callable[[], Awaitable[None]] | None = None
        """Called once by `dispose()` the moment the tree is judged — the ladder climbed, the
        tree swept, the child reaped, what was seen in `observed` — before its pipes, cgroup
        and private directories are released (a run's result need not wait for those)."""
        self.sealed_in_cgroup = False
        """Nothing of the child's tree can leave its cgroup, which announces when it is empty
        (see the module docstring); set by `spawn_child`."""
        self.private_mounts = False
        """The child's sandbox gives it a mount namespace of its own, which this process holds
        while the child lives (`hold_mounts`); set by `spawn_child`."""
        self._mounts: int | None = None
        self.held: str | None = None
        """How the tree is held still (`hold_still`): `freezer` or `sigstop`; `None` while it
        runs."""
        self._stopped: list[psutil.Process] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> bool:
        """Whether the child process has exited (it may not be reaped yet)."""
        return self.proc.exited()

    # --- the context: background jobs, and the one dispose site -----------------------------

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._start_jobs(self._tg)
        return self

    def _start_jobs(self, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(self._drain_stderr)
        tg.start_soon(self._watch_exit)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        tg, self._tg = self._tg, None
        try:
            await self.dispose()
        finally:
            # The jobs end with the child (or are cut here); the group's own scope is the
            # current one again, so it is exited in order.
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
        return None

    async def _watch_exit(self) -> None:
        """When the child exits, end its output stream even if another process holds it open."""
        await self.proc.wait()
        out = self.proc.stdout
        # Everything the child wrote before it exited is in the pipe now: let the reader take
        # it. Bounded, because a grandchild may keep writing into the pipe it inherited.
        with anyio.move_on_after(EXIT_DRAIN_SECONDS):
            while out.unread() > 0 and not self._output_ended():
                await self._reader_progress()
        if not self._output_ended():
            out.close()  # the reader wakes to end-of-stream

    def _output_ended(self) -> bool:
        """Whether the reader has seen the end of the child's output (a raw child's caller
        reads it: unknown here)."""
        return False

    async def _reader_progress(self) -> None:
        await anyio.sleep(0.002)

    async def _drain_stderr(self) -> None:
        try:
            while True:
                try:
                    data = await self.proc.stderr.receive()
                except anyio.EndOfStream:
                    return
                self.stderr.write(data)
        finally:
            self.stderr_done.set()

    def spawn_failure(self) -> str | None:
        """The trampoline's exec-failure line, if the command could not be executed."""
        for line in self.stderr.tail(2000).splitlines():
            if line.startswith(EXEC_FAILED_MARKER):
                return line[len(EXEC_FAILED_MARKER) :].strip()
        return None

    # --- the sandbox's mount namespace ---------------------------------------------------------

    def hold_mounts(self) -> None:
        """Hold the child's own mount namespace (its sandbox's view of the file system) from
        now until its tree is judged.

        The kernel tears a mount namespace down when the last process in it exits, and it does
        so before that exit shows: before the child's pidfd turns readable, and even before
        its output ends (an exiting process's files are released after its namespaces). That
        is every mount of the view unmounted and an RCU grace period waited for, ≈ 0.5 ms on a
        stock host, on the path of every sandboxed child's result, a crash's included. Held
        here, the namespace outlives the child, and `dispose` lets it go once the tree is
        judged and the result handed on, in a worker thread (the teardown then runs there).
        Called when the child answered `initialize` (its sandbox is in place by then) and
        when its dispose begins. Best effort: a namespace this process may not open (a child
        it may not inspect) is not held, and the child's exit tears it down as before."""
        if self.private_mounts and self._mounts is None and self.proc.status is None:
            # The child is not reaped before its dispose ends: its pid names no one else.
            self._mounts = own_mount_namespace(self.pid)

    async def _let_mounts_go(self) -> None:
        fd, self._mounts = self._mounts, None
        if fd is not None:
            # The teardown the child's exit was spared, off the event loop.
            await anyio.to_thread.run_sync(os.close, fd)

    # --- holding still ----------------------------------------------------------------------

    def stop_soon(self) -> None:
        """Begin holding the tree still now, without waiting: where its cgroup has a v2 freezer
        its members are asked to freeze at once (a child that has just answered is still on a
        CPU and stops there, rather than being woken later only to stop); `hold_still`
        finishes the hold, `resume` undoes it."""
        if self.held is None and self.cgroup is not None:
            self.cgroup.begin_freeze()

    async def hold_still(self) -> str:
        """Stop every process of the tree, the child included, until `resume()`: frozen in its
        cgroup where the tier has a freezer (and the tree cannot leave it), else each one
        SIGSTOPped, in passes until no new process turns up. Nothing of the tree runs, forks,
        writes or asks while held. How it is held (`freezer` or `sigstop`)."""
        if self.held is not None:
            return self.held
        frozen = self.cgroup is not None and await self.cgroup.freeze()
        stopped: dict[int, psutil.Process] = {}
        if not frozen:
            self.proc.send_signal(signal.SIGSTOP)  # through the pidfd: never a recycled pid
        if not frozen or not self.sealed_in_cgroup:
            # Without a freezer, or for processes that may have left the cgroup: by signal,
            # in passes, since a process not yet stopped may fork.
            inside = self._members() if frozen else set()
            for _ in range(4):
                found = tree_procs(
                    self.pid, self.marker, thorough=not self.sealed_in_cgroup, members=inside
                )
                fresh = [
                    p
                    for p in found
                    if p.pid not in stopped and p.pid not in inside and p.pid != self.pid
                ]
                if not fresh:
                    break
                signal_procs(fresh, signal.SIGSTOP)
                stopped.update((p.pid, p) for p in fresh)
        self._stopped = list(stopped.values())
        self.held = "freezer" if frozen else "sigstop"
        return self.held

    def resume(self) -> None:
        """Let a held tree run again (see `hold_still`), or one `stop_soon` began to hold."""
        held, self.held = self.held, None
        if self.cgroup is not None:
            # Also after a freeze that was asked (`stop_soon`) but never waited for, or that did
            # not settle in time (the hold fell back to SIGSTOP): thawed all the same.
            self.cgroup.thaw()
        if held is None:
            return
        if held != "freezer":
            self.proc.send_signal(signal.SIGCONT)
        stopped, self._stopped = self._stopped, []
        signal_procs(stopped, signal.SIGCONT)

    async def dispose(self) -> DisposeReport:
        """Take the child and its whole tree down; see the module docstring for the ladder.
        Idempotent: a second call returns the first one's report."""
        if self.disposed is not None:
            return self.disposed
        policy = self.policy
        started = time.monotonic()
        try:
            return await self._dispose(policy, started)
        finally:
            if self._mounts is not None:  # something raised before the namespace was let go
                os.close(self._mounts)
                self._mounts = None

    async def _dispose(self, policy: DisposePolicy, started: float) -> DisposeReport:
        with anyio.CancelScope(shield=True):
            self.resume()  # a held tree climbs the ladder like any other
            self.hold_mounts()  # its exit on the ladder then skips the namespace's teardown
            rung = await self._climb(policy)
            survivors = await self._sweep(policy.kill)
            status = await self.proc.collect()
            await self._settle_stderr()
            observed = self.observed
            if self.cgroup is not None:
                observed.oom_kills = self.cgroup.oom_kills()
                observed.pids_max_hits = self.cgroup.pids_max_hits()
            if self.proc.lost is not None:
                observed.lost = self.proc.lost
            if status is not None:
                observed.exit_code = status.exit_code
                observed.signal = status.signal
                observed.cpu_seconds = status.cpu_seconds
            observed.rung = rung
            observed.stderr_tail = self.stderr.tail()
            observed.survivors = survivors
            judged, self.on_judged = self.on_judged, None
            if judged is not None:
                await judged()
                # Whoever waits for that result goes first; the rest can wait for it.
                await anyio.lowlevel.cancel_shielded_checkpoint()
            await self._let_mounts_go()  # before the sandbox's directories are removed
            self.proc.close_pipes()
            if self.cgroup is not None and not self.cgroup.remove():
                # Past the verdict: a member the sweep could not have missed (it read the
                # membership) is told in the report and the log.
                survivors = sorted(set(survivors) | self.cgroup.members())
                observed.survivors = survivors
            cleanup, self.cleanup = self.cleanup, None
            if cleanup is not None:
                cleanup()
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

    async def _climb(self, policy: DisposePolicy) -> Rung:
        rung: Rung = "none"
        if self._output_ended():
            # Output closed: the child is probably exiting right now (the kernel closes its
            # files just before it reports the exit). Don't count that as a rung we needed.
            await self.proc.wait_for(0.05)
        if not self._alive():
            return rung
        if await self._shutdown_rung(policy):
            rung = "shutdown"
            if not self._alive():
                return rung
        rung = "exit"
        if not self.proc.stdin.closed:
            with anyio.move_on_after(min(0.05, policy.eof)):
                await self._say_exit()
        self._close_stdin()
        await self.proc.wait_for(self._eof_left(policy))
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

    async def _shutdown_rung(self, policy: DisposePolicy) -> bool:
        """The polite rung before the EOF lifeline; whether it was tried (a raw child has
        none)."""
        return False

    def _eof_left(self, policy: DisposePolicy) -> float:
        """How long the EOF lifeline is still waited for, now that stdin is closed.

        The grace counts from the moment stdin closed, so after the shutdown rung closed it
        only what is left of it is waited. And after a `shutdown` the child did not answer,
        nothing is: EOF is queued behind that request in the same ordered pipe, so a child
        that has not read and answered the request in the shutdown grace (tether's own child
        serves `shutdown` on its reader, which sees EOF only after answering) would not see
        EOF either — that wait was already spent, on the shutdown rung."""
        if self._shutdown_unanswered:
            return 0.0
        assert self._stdin_closed_at is not None
        return max(0.0, policy.eof - (time.monotonic() - self._stdin_closed_at))

    async def _say_exit(self) -> None:
        """What is said on stdin just before it is closed (a raw child: nothing)."""

    def _close_stdin(self) -> None:
        if self._stdin_closed_at is None:
            self._stdin_closed_at = time.monotonic()
        self.proc.stdin.close()

    def _members(self) -> set[int]:
        return self.cgroup.members() if self.cgroup is not None else set()

    def _signal_tree(self, sig: int) -> None:
        if sig == signal.SIGKILL and self.cgroup is not None:
            self.cgroup.kill()
        self.proc.signal_group(sig)
        if sig == signal.SIGTERM:
            self.proc.signal_group(signal.SIGCONT)
        procs = tree_procs(
            self.pid, self.marker, thorough=not self.sealed_in_cgroup, members=self._members()
        )
        # The child itself is signalled through its pidfd, the rest by verified psutil handles.
        self.proc.send_signal(sig)
        if sig == signal.SIGTERM:
            self.proc.send_signal(signal.SIGCONT)
        signal_procs([p for p in procs if p.pid != self.pid], sig)

    async def _sweep(self, grace: float) -> list[int]:
        """SIGKILL whatever is left of the tree until none of it is alive, or grace runs out."""
        deadline = time.monotonic() + grace
        delay = 0.002
        cgroup = self.cgroup
        if await self._alone(cgroup):
            return []
        while True:
            if cgroup is not None and cgroup.announces_empty:
                populated = cgroup.populated()
                if populated:
                    # A v2 cgroup says when it is empty: kill what is left in it and wait for
                    # that, instead of reading its membership again and again.
                    cgroup.kill()
                    with anyio.move_on_after(min(KILL_SETTLE, deadline - time.monotonic())):
                        await cgroup.wait_empty()
                    if cgroup.populated():
                        # `cgroup.kill` signals each process's leader thread alone: one whose
                        # leader has exited (its main thread called exit(2) by itself) keeps
                        # its other threads. A kill by pid reaches the whole process.
                        cgroup.freeze_and_kill()
                        with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                            await cgroup.wait_empty()
                    populated = cgroup.populated()
                if populated is False and self.sealed_in_cgroup and not self._alive():
                    return []  # nothing of the tree can be anywhere else
            # One pass over /proc, shared with the other children's sweeps that ask in the
            # same turn of the event loop (a fleet disposed at once), begun after this asks.
            snap = await fresh_snapshot()
            members = self._members()
            # Once the child has exited (it is a zombie until `reap`), its children have been
            # reparented: the walk by parentage would find nothing, so it is skipped.
            gone = not self._alive()
            found = tree_procs(self.pid, self.marker, members=members, root_exited=gone, snap=snap)
            left = [p for p in found if p.pid != self.pid]
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

    async def _alone(self, cgroup: ChildCgroup | None) -> bool:
        """Whether the exited child's reaper shows that nothing it started outlived it (and
        has the status: `collect_if_alone`): then nothing of the tree is alive, and no pass
        over /proc is needed. Asked only when its cgroup, if it has one, holds nobody either."""
        if self._alive() or self.sealed_in_cgroup:
            return False
        if cgroup is not None:
            empty = cgroup.populated() is False if cgroup.announces_empty else not self._members()
            if not empty:
                return False
        return await self.proc.collect_if_alone() is not None

    async def _settle_stderr(self) -> None:
        # Give the drain a moment to read what the dead child left in the pipe, so the tail
        # shows its last words; a grandchild holding stderr open cannot make us wait longer.
        if self.stderr_done.is_set():
            return
        with anyio.move_on_after(0.05):
            await self.stderr_done.wait()

    def still_alive(self, snap: ProcSnapshot) -> list[int]:
        """What of the child's tree `snap` (a /proc snapshot taken after the dispose, as the
        sweep takes them) finds alive: the child, its cgroup's members, its session, process
        group and tree marker. A stop's receipt counts them (none, after a dispose)."""
        gone = not self._alive()
        found = tree_procs(
            self.pid, self.marker, members=self._members(), root_exited=gone, snap=snap
        )
        return sorted(p.pid for p in found)

    def kill_now(self) -> None:
        """SIGKILL the child's tree without waiting (interpreter exit: no event loop left)."""
        if self.cgroup is not None:
            self.cgroup.kill()
        procs = tree_procs(self.pid, self.marker)
        self.proc.send_signal(signal.SIGKILL)
        signal_procs(procs, signal.SIGKILL)


class SupervisedChild(WiredChild, SupervisedProcess):
    """A live child that speaks tether's protocol: the endpoint on its pipes, the typed
    session (`WiredChild`, whose `exit` notification replaces the raw process's silence before
    stdin closes), and the polite `shutdown` rung. See the module docstring."""

    def __init__(
        self,
        proc: ChildProcess,
        marker: str,
        *,
        dispose: DisposePolicy,
        cgroup: ChildCgroup | None = None,
        max_message_bytes: int,
        ring_bytes: int,
    ) -> None:
        super().__init__(proc, marker, dispose=dispose, cgroup=cgroup, ring_bytes=ring_bytes)
        self._wire(proc.stdout, proc.stdin, max_message_bytes=max_message_bytes)

    # --- the reader, and the protocol's rungs ------------------------------------------------

    def _start_jobs(self, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(self._read)
        super()._start_jobs(tg)

    def _output_ended(self) -> bool:
        return self.endpoint.end is not None

    def _on_ready(self) -> None:
        self.hold_mounts()

    async def _reader_progress(self) -> None:
        # The reader routes each chunk as soon as it reads it; wake as soon as it ends.
        with anyio.move_on_after(0.002):
            await self.endpoint.ended.wait()

    async def _shutdown_rung(self, policy: DisposePolicy) -> bool:
        if not self._polite:
            return False
        self._shutdown_unanswered = True
        with anyio.move_on_after(policy.shutdown):
            await self._say_goodbye()
            self._shutdown_unanswered = False
            self._close_stdin()
            await self.proc.wait()
        return True


def own_mount_namespace(pid: int) -> int | None:
    """An open descriptor of process `pid`'s mount namespace when it is not this process's own;
    `None` when it is, or when this process may not open it."""
    try:
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    st, own = os.fstat(fd), os.stat("/proc/self/ns/mnt")
    if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
        os.close(fd)  # not in a namespace of its own (yet): nothing to spare its exit
        return None
    return fd


def _alive(p: psutil.Process) -> bool:
    # is_running: the same process (its start time), not a new one that took its pid.
    return p.is_running() and running(p.pid)
