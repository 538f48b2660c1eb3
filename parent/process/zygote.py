"""The supervisor's side of the zygote (`ChildConfig(spawner="zygote")`): children forked from
a process that already imported the child runtime, instead of a fresh interpreter each.

Theory of operation
-------------------
`Zygote.start()` (`launch()`, then `ready()`: a supervisor launches its zygote while the plan
of the run that needs it is still being made) runs `python -I -m tether.child.zygote FD`
through the same trampoline as every child (`ChildProcess.spawn`): its own session,
PR_SET_PDEATHSIG tied to the supervisor's thread, a tree marker, and the scrubbed environment
(plus a padding variable that reserves the environment block every forked child rewrites; see
`tether/child/zygote.py`). FD is one end of a `SOCK_SEQPACKET` socket pair; the supervisor
keeps the other end (close-on-exec: cold children never inherit it). Its argv and environment
are built in `zygote_command`; `launch()` takes the zygote the `tether` command launched before
its imports (`early`) instead of starting one, when that zygote got the same environment.

`Zygote.spawn(spec)` sends the child's pipe ends (SCM_RIGHTS), environment, rlimits, cgroup
files, working directory, isolation plan and argv extras, and gets the pid back; the forked
child runs the trampoline's sequence (`tether.contain.sequence`) itself before any child code
runs, sandbox included.

Every request (spawn, reap, release, standby) is awaited, never a blocking call on the event
loop's thread: a zygote that stalls holds up only the callers waiting for it, not the other
children's I/O, deadlines and ladders. The zygote answers one request at a time, in order, so
one request is on the socket at a time (`_turn`): waiting for the turn can be cancelled (nothing
was sent yet); once a request is sent, its exchange is shielded and bounded by
`REPLY_SECONDS`, so no answer is ever left on the socket to be read as the next request's. A
zygote that does not answer within that is SIGKILLed and marked broken; one that dies answers
at once (end of stream); either way the call fails with the reason.

After `STANDBY_AFTER` seconds without a request (2 ms while spawns come back to back) the
zygote forks a standby ahead of time, and the next spawn is handed to it instead of forked
(`forks` counts both), even before it has parked when the spawn claims its cgroup: the fork
and the pages a session writes are then paid before the request, and the child it becomes
runs the same sequence from the request on. Its cgroup is the one step taken ahead
(`child_cgroup`): the supervisor makes a cgroup for the standby, which joins it before the
request (the join waits for the kernel's migration lock), and gives it, with the child's
limits written in, to the child whose spawn names it (claims are matched by cgroup, so spawns
may overlap); see `tether/child/zygote.py`.

A zygote may run in a PID namespace of its own (`launch(..., contained=True)`: under the
`pidns` launcher's shim, as a placed run's node host starts it): every child it forks is then
in that namespace, so whatever kills the shim — the node host's death included — the kernel
ends the zygote, its standby and every child and descendant of theirs, with no cooperation
from anyone, as the `pidns` launcher does for one exec'd child. The zygote knows its children
by the namespace's pids; each spawn's answer carries the child's pidfd, through which the
supervisor sees the same process under its own pid (`_host_pid`) and signals it; a reap asks
by the zygote's pid (`ZygoteProcess.zygote_pid`).

A zygote-forked child is not the supervisor's child, so `ZygoteProcess` differs from
`ChildProcess` only where that matters: exit is seen through `pidfd_open(pid)` (which works for
any process), and the status comes from the zygote. Each spawn hands the zygote one end of a
socket pair made for that child (its verdict socket, `tether/child/verdicts.py`): the moment the
child exits the zygote writes its status and rusage there, and whether anything the child
started still runs (`collect_if_alone`: if not, the tree needs no sweep), without waiting to be
asked; `collect()` reads it (or, when it carried no status, asks `reap`). The zygote reaps the
child only once the supervisor closes its end, so the child stays a zombie — its pid, session
and group id held — until the supervisor has swept the tree, exactly as a cold child. Signals
go through the pidfd. If the zygote dies, its children die of their PR_SET_PDEATHSIG; their
status is lost and `ZygoteProcess.lost` says why, which the run's result reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import select
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil

from tether.parent.process import zygote_command as command
from tether.parent.process.cgroups import ChildCgroup
from tether.parent.process.early import take_early
from tether.parent.process.host import Host
from tether.parent.process.launchers import LaunchContext, Pidns
from tether.parent.process.limits import Limits
from tether.parent.process.pipes import stdio_pipes
from tether.parent.process.proc import ChildProcess, ExitStatus, SpawnError
from tether.parent.process.start import SpawnSpec

READY_SECONDS = 15.0
"""How long the zygote may take to import the child runtime and say it is ready."""
REPLY_SECONDS = 5.0
"""How long one spawn or reap may take to be answered."""
MAX_MESSAGE = 1 << 20
ZYGOTE_LOST = "the zygote that forked this child died, taking the child with it"


def supported() -> str | None:
    """Why the zygote cannot be used on this host, or `None` when it can."""
    if not hasattr(os, "pidfd_open") or not hasattr(socket, "send_fds"):
        return "the zygote needs pidfd_open and SCM_RIGHTS (Linux, Python 3.9+)"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as exc:
        return f"the zygote needs pidfd_open: {exc.strerror or exc}"
    return None


def standby_pids(zygote_pid: int) -> list[int]:
    """The zygote's standby, seen from outside (leak checks): a child of the zygote still in
    the zygote's session. A child handed a request calls `setsid()` before any child code
    runs; the standby never has."""
    try:
        sid = os.getsid(zygote_pid)
        kids = psutil.Process(zygote_pid).children()
    except (OSError, psutil.Error):
        return []
    found = []
    for kid in kids:
        try:
            if os.getsid(kid.pid) == sid:
                found.append(kid.pid)
        except OSError:
            continue
    return found


def _host_pid(pidfd: int) -> int | None:
    """The pid, in this process's PID namespace, of the process `pidfd` refers to; `None`
    when it has none here (or is gone)."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}", "rb") as f:
            for line in f:
                if line.startswith(b"Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError):
        return None
    return None


class Zygote:
    """One running zygote: its process (a `ChildProcess`) and the supervisor's socket end."""

    def __init__(self, proc: ChildProcess, sock: socket.socket, contained: bool = False) -> None:
        self.proc = proc
        self._sock = sock
        self.contained = contained
        """Whether the zygote runs in a PID namespace of its own (see the module docstring)."""
        self.env_bytes = 0
        """Room in a child's environment block (the zygote reports it when ready)."""
        self.broken: str | None = None
        """Why this zygote can no longer be used; `None` while it can."""
        self.standby_after: float | None = None
        """The zygote's idle delay before it forks its standby (`None`: it never does)."""
        self.forks = {"standby": 0, "fresh": 0}
        """Children handed to a parked standby, and children forked on request."""
        self._standby_cgroup: tuple[str, ChildCgroup] | None = None
        """The cgroup (its name, and it) the zygote puts its standby in."""
        self._next_cgroup: tuple[str, ChildCgroup] | None = None
        """A standby cgroup made, to be told to the zygote with the next spawn."""
        self._claimed: dict[tuple[str, ...], tuple[str, ChildCgroup]] = {}
        """Standby cgroups `child_cgroup` gave to children not spawned yet, by their
        `cgroup.procs` files (what the child's spawn spec names)."""
        self._turn = anyio.Lock(fast_acquire=True)  # no loop turn when nobody holds it
        """Held from a request's send to its answer: the zygote answers in order."""
        self.on_standby_cgroup: Callable[[list[str]], None] | None = None
        """Told the `cgroup.procs` files of each cgroup made for a standby (the supervisor's
        keeper watches them, so a supervisor's death does not leave one behind)."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def standby_cgroups(self) -> list[Path]:
        """The directories of the cgroups made for the zygote's standbys (leak checks: they
        live as long as the zygote, like its standby)."""
        held = (self._standby_cgroup, self._next_cgroup)
        return [d for h in held if h is not None for d in h[1].dirs.values()]

    @property
    def usable(self) -> bool:
        return self.broken is None and not self.proc.exited()

    # --- start --------------------------------------------------------------------------------

    @classmethod
    def launch(
        cls, env: dict[str, str], standby_after: float | None = None, *, contained: bool = False
    ) -> Zygote:
        """Start the zygote process (it is not ready until `ready()`); raises `SpawnError`.
        `standby_after`: see `zygote_command.STANDBY_AFTER` (its value when not given); `contained`:
        in a PID namespace of its own, under the `pidns` launcher's shim."""
        after = command.STANDBY_AFTER if standby_after is None else standby_after
        early = None if contained else take_early(env, after)
        if early is not None:
            proc, ours = ChildProcess(early.popen, *early.pipes), early.sock
        else:
            proc, ours = cls._spawn(env, after, contained)
        ours.setblocking(False)
        zygote = cls(proc, ours, contained)
        zygote.standby_after = after
        return zygote

    @staticmethod
    def _spawn(
        env: dict[str, str], after: float | None, contained: bool
    ) -> tuple[ChildProcess, socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            spec = command.zygote_spec(env, theirs.fileno(), after)
            if contained:
                ctx = LaunchContext(
                    command=spec.argv, env=spec.env, explicit_env={}, workspace=".", limits=Limits()
                )
                spec = dataclasses.replace(spec, argv=Pidns().argv(ctx))
            return ChildProcess.spawn(spec), ours
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()

    @classmethod
    async def start(
        cls,
        env: dict[str, str],
        ready_seconds: float = READY_SECONDS,
        standby_after: float | None = None,
        *,
        contained: bool = False,
    ) -> Zygote:
        """Start a zygote and wait (without blocking the event loop) until it is ready."""
        zygote = cls.launch(env, standby_after, contained=contained)
        await zygote.ready(ready_seconds)
        return zygote

    async def ready(self, ready_seconds: float = READY_SECONDS) -> None:
        """Wait (without blocking the event loop) until the launched zygote says it is ready;
        one that does not (in time, or at all) is closed and `SpawnError` says why."""
        try:
            with anyio.move_on_after(ready_seconds):
                await anyio.wait_readable(self._sock.fileno())
            self._take_ready()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise

    def _take_ready(self) -> None:
        try:
            data = self._sock.recv(MAX_MESSAGE)
        except BlockingIOError:
            data = None
        except OSError:
            data = b""
        if not data:
            why = "did not become ready in time" if data is None else "exited before it was ready"
            raise SpawnError(f"the zygote {why}{self._last_words()}")
        self.env_bytes = int(json.loads(data)["envBytes"])

    def _last_words(self) -> str:
        try:
            words = os.read(self.proc.stderr.fd, 4096).decode(errors="replace").strip()
        except OSError:
            return ""
        return f": {words.splitlines()[-1][:300]}" if words else ""

    # --- requests -----------------------------------------------------------------------------

    async def _ask(self, message: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
        """Send one request and await its answer; raises `SpawnError` (the zygote is then
        broken, and every later request fails at once)."""
        async with self._turn:
            return await self._exchange(message, fds)

    async def _exchange(
        self,
        message: dict[str, Any],
        fds: list[int] | None = None,
        *,
        received: list[int] | None = None,
    ) -> dict[str, Any]:
        """`_ask` for a caller that holds `_turn`. Descriptors the answer carries go to
        `received` (the caller's to close), or are closed when nobody asked for them."""
        if not self.usable:
            raise SpawnError(self.broken or "the zygote has exited")
        data = json.dumps(message).encode()
        reply: bytes | None = None
        deadline = anyio.current_time() + REPLY_SECONDS
        with anyio.CancelScope(shield=True, deadline=deadline):
            try:
                await self._send(data, fds)
                reply, got_fds = await self._receive()
                if received is not None:
                    received.extend(got_fds)
                else:
                    for fd in got_fds:
                        os.close(fd)
            except (OSError, anyio.ClosedResourceError) as exc:
                reply = b""
                why = getattr(exc, "strerror", None) or str(exc) or "its socket was closed"
                self._break(f"the zygote is gone ({why})")
        if reply is None:
            self._break(f"the zygote did not answer within {REPLY_SECONDS:g}s")
            self.proc.send_signal(signal.SIGKILL)  # no late answer may be taken for another
            raise SpawnError(self.broken or "")
        if not reply:
            self._break("the zygote died")
            raise SpawnError(self.broken or "")
        got: dict[str, Any] = json.loads(reply)
        return got

    async def _send(self, data: bytes, fds: list[int] | None) -> None:
        while True:
            try:
                if fds:
                    socket.send_fds(self._sock, [data], fds)
                else:
                    self._sock.send(data)
                return
            except BlockingIOError:
                await anyio.wait_writable(self._sock)

    async def _receive(self) -> tuple[bytes, list[int]]:
        while True:
            await anyio.wait_readable(self._sock)
            try:
                data, fds, _, _ = socket.recv_fds(self._sock, MAX_MESSAGE, 1)
            except BlockingIOError:
                continue
            return data, fds

    def _break(self, why: str) -> None:
        if self.broken is None:
            self.broken = why

    async def child_cgroup(
        self, host: Host, name: str, *, memory: int | None, pids: int | None
    ) -> ChildCgroup:
        """The cgroup for a child that `spawn` starts next (`spawn_child` asks for it just
        before): the one the standby already joined, with the child's limits written into it
        (it keeps its own name: cgroup v2 renames nothing), or a new one named `name`. The
        standby cgroup for the standby after it is made here too. Raises `OSError`."""
        cgroup = await self._claim(memory=memory, pids=pids) or ChildCgroup.create(
            host, name, memory=memory, pids=pids
        )
        if (
            self._standby_cgroup is None
            and self._next_cgroup is None
            and self.standby_after is not None
            and self.usable
        ):
            ident = f"{os.getpid()}-zygote-{os.urandom(4).hex()}"
            with contextlib.suppress(OSError):  # the standby then joins at the request
                made = ChildCgroup.create(host, ident, memory=None, pids=None)
                self._next_cgroup = (ident, made)
            if self._next_cgroup is not None and self.on_standby_cgroup is not None:
                self.on_standby_cgroup(self._next_cgroup[1].procs_files)
        return cgroup

    async def _claim(self, *, memory: int | None, pids: int | None) -> ChildCgroup | None:
        """The standby cgroup, now a child's, with its limits; `None` when there is none or
        its limits cannot be written (it is then let go with its standby)."""
        if self._standby_cgroup is None or not self.usable:
            return None
        ident, cgroup = self._standby_cgroup
        self._standby_cgroup = None  # taken before any wait: no other child can claim it
        try:
            # On cgroup v1 a memory limit below what the standby holds is refused (EBUSY).
            cgroup.limit(memory=memory, pids=pids)
        except OSError:
            with anyio.CancelScope(shield=True):  # the cgroup is ours to clean up either way
                await self._release(ident)
            cgroup.remove()
            return None
        self._claimed[tuple(cgroup.procs_files)] = (ident, cgroup)
        return cgroup

    async def _release(self, ident: str, *, turn_held: bool = False) -> None:
        """Have the zygote take down the standby in cgroup `ident`, which is no longer the
        standbys' (it waits for the standby's end, so the cgroup is empty after)."""
        message = {"op": "release", "claims": ident}
        with contextlib.suppress(SpawnError):
            if turn_held:
                await self._exchange(message)
            else:
                await self._ask(message)

    async def spawn(self, spec: SpawnSpec) -> ZygoteProcess:
        """Fork a child with `spec` (its argv: the extras after `python -I -m tether.child`);
        raises `SpawnError`. When `spec` names a cgroup `child_cgroup` took from the standby,
        the request says so: the standby, parked or not yet, is handed the request without
        joining anything (it is there already); one that does not take it in time, the zygote
        takes down before it forks the child into that cgroup."""
        claimed = self._claimed.pop(tuple(spec.cgroup_procs), None)
        claims = claimed[0] if claimed is not None else None
        received: list[int] = []
        verdict: socket.socket | None
        verdict, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with stdio_pipes() as pipes:  # ours are closed if this raises
                # A spawn that claimed the standby's cgroup cannot be cancelled while it waits
                # for its turn: the zygote must hear of the claim (the standby is in that cgroup).
                with anyio.CancelScope(shield=claims is not None):
                    async with self._turn:
                        fds = [*pipes.child, theirs.fileno()]
                        reply = await self._fork(spec, claims, fds, received)
                theirs.close()  # the zygote has its own
                self.forks["standby" if reply.get("standby") else "fresh"] += 1
                zygote_pid = int(reply["pid"])
                pid: int | None = zygote_pid
                if self.contained:
                    pid = _host_pid(received[0]) if received else None
                if pid is None:
                    # The child lives in the namespace, out of the supervisor's sight: the
                    # zygote takes it down with it (it is SIGKILLed, broken).
                    self._break("the zygote's answer carried no pidfd for its child")
                    self.proc.send_signal(signal.SIGKILL)
                    raise SpawnError(self.broken or "")
                pidfd = received.pop(0) if received else None
                assert verdict is not None
                verdict.setblocking(False)
                child = ZygoteProcess(
                    self, pid, *pipes.ours, pidfd=pidfd, zygote_pid=zygote_pid, verdict=verdict
                )
                verdict = None  # the child's now
                return child
        finally:
            theirs.close()
            if verdict is not None:
                verdict.close()
            for fd in received:
                os.close(fd)

    async def _fork(
        self, spec: SpawnSpec, claims: str | None, fds: list[int], received: list[int]
    ) -> dict[str, Any]:
        """The spawn request, `_turn` held; its answer, which has the child's pid."""
        needed = command.block_bytes(spec.env) + 1
        if needed > self.env_bytes:
            if claims is not None:
                # The caller may start the child by exec in that cgroup.
                await self._release(claims, turn_held=True)
            raise SpawnError(
                f"the child's environment ({needed} bytes) does not fit the zygote's "
                f"({self.env_bytes} bytes); use spawner='exec' for this run"
            )
        request: dict[str, Any] = {
            "op": "spawn",
            "env": spec.env,
            "rlimits": spec.rlimits,
            "cgroupProcs": spec.cgroup_procs,
            "cwd": spec.cwd or os.getcwd(),
            "argv": spec.argv,
            "plan": spec.plan,
        }
        if claims is not None:
            request["claims"] = claims
        told = self._next_cgroup
        if told is not None:
            request["nextCgroup"] = {"id": told[0], "procs": told[1].procs_files}
        try:
            reply = await self._exchange(request, fds, received=received)
        finally:
            if told is not None:
                self._standby_cgroup, self._next_cgroup = told, None
        if "pid" not in reply:
            raise SpawnError(f"the zygote could not fork: {reply.get('error', reply)}")
        return reply

    async def standby(self) -> dict[str, Any]:
        """The zygote's standby: `{"pid": PID or None, "parked": bool, "lost": N}`. Each ask is
        a request, and a request puts off the standby's fork by `standby_after`."""
        return await self._ask({"op": "standby"})

    async def parked(self, within: float = 10.0) -> int | None:
        """Wait until the zygote's standby is parked and return its pid; `None` if the zygote
        forks none, or none parked `within` seconds."""
        if self.standby_after is None:
            return None
        every = max(0.05, 3 * self.standby_after)  # slower than the delay each ask restarts
        with anyio.move_on_after(within):
            while True:
                await anyio.sleep(every)
                got = await self.standby()
                if got["parked"]:
                    return int(got["pid"])
        return None

    async def reap(self, pid: int) -> ExitStatus | None:
        """Have the zygote reap its exited child `pid`; `None` if the status is lost."""
        try:
            reply = await self._ask({"op": "reap", "pid": pid})
        except SpawnError:
            return None
        return _status(reply)

    # --- close --------------------------------------------------------------------------------

    async def aclose(self, grace: float = 1.0) -> None:
        """End the zygote: end of input, then SIGKILL if it does not exit within `grace`."""
        with anyio.CancelScope(shield=True):
            self._break("the zygote was closed")
            anyio.notify_closing(self._sock)  # a request waiting for an answer ends now
            self._sock.close()
            self.proc.stdin.close()
            if not await self.proc.wait_for(grace):
                self.proc.send_signal(signal.SIGKILL)
                self.proc.signal_group(signal.SIGKILL)
                await self.proc.wait_for(grace)
            self.proc.reap()
            self.proc.close_pipes()
            # The standby dies of its death signal with the zygote; then its cgroup is empty.
            for held in (self._standby_cgroup, self._next_cgroup):
                if held is not None:
                    await _remove_when_empty(held[1], grace)
            self._standby_cgroup = self._next_cgroup = None


def _status(reply: dict[str, Any]) -> ExitStatus | None:
    """The exit status a reap's answer carries; `None` if it carries none (lost)."""
    if "returncode" not in reply:
        return None
    usage = resource.struct_rusage(
        (float(reply["utime"]), float(reply["stime"]), int(reply["maxrss"])) + (0,) * 13
    )
    return ExitStatus(int(reply["returncode"]), usage)


async def _remove_when_empty(cgroup: ChildCgroup, within: float) -> None:
    if cgroup.announces_empty:
        with anyio.move_on_after(within):
            await cgroup.wait_empty()
    # Polls each directory until it can be removed (v1 says nothing when it empties).
    await anyio.to_thread.run_sync(cgroup.remove, within)


class ZygoteSpawner:
    """The `Spawner` of children forked from a zygote (`zygote()`: the one running now, a
    supervisor restarts it), which also makes each child's cgroup (`child_cgroup`, see
    `Zygote.child_cgroup`). `skip`: how much of a spec's argv is the command the zygote
    stands for; the rest goes to the child as its arguments. `contains`: the launcher a
    contained zygote stands for (`pidns`; see `spawn.contained_by`)."""

    def __init__(
        self, zygote: Callable[[], Zygote | None], skip: int, contains: str | None = None
    ) -> None:
        self._zygote = zygote
        self._skip = skip
        self.contains = contains

    async def __call__(self, spec: SpawnSpec) -> ChildProcess:
        zygote = self._zygote()
        if zygote is None:
            raise SpawnError("the zygote is not running")
        return await zygote.spawn(dataclasses.replace(spec, argv=list(spec.argv[self._skip :])))

    async def child_cgroup(
        self, host: Host, name: str, *, memory: int | None, pids: int | None
    ) -> ChildCgroup:
        zygote = self._zygote()
        if zygote is None:
            return ChildCgroup.create(host, name, memory=memory, pids=pids)
        return await zygote.child_cgroup(host, name, memory=memory, pids=pids)


class ZygoteProcess(ChildProcess):
    """A child the zygote forked: the `ChildProcess` interface, for a process that is not ours."""

    def __init__(
        self,
        zygote: Zygote,
        pid: int,
        stdin: int,
        stdout: int,
        stderr: int,
        *,
        pidfd: int | None = None,
        zygote_pid: int | None = None,
        verdict: socket.socket | None = None,
    ) -> None:
        # The zygote does not reap it before we ask, so the pid cannot have been reused yet.
        super().__init__(None, stdin, stdout, stderr, pid=pid, pidfd=pidfd)
        self.zygote = zygote
        self.zygote_pid = pid if zygote_pid is None else zygote_pid
        """The child's pid as the zygote knows it (in its PID namespace, when it has one)."""
        self._verdict_sock = verdict
        """Our end of the child's verdict socket (`tether.child.verdicts`); closing it lets
        the zygote reap the child."""
        self._verdict: dict[str, Any] | None = None
        """What the zygote said when the child exited (empty: it said nothing)."""

    def exited(self) -> bool:
        if self.status is not None:
            return True
        if self.pidfd is None:
            return True  # the pid was gone before we could watch it
        # poll, not select: a pidfd may be numbered past select()'s 1024 limit.
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        return bool(poller.poll(0))

    def reap(self) -> ExitStatus | None:
        """The exit status once `collect()` has it: only the zygote can reap this child, and
        it must be asked (awaited)."""
        return self.status

    async def collect(self) -> ExitStatus | None:
        """The exit status: the one the child's verdict carried (the zygote reaps the child
        once our end of the verdict socket is closed, here), else asked of the zygote."""
        if self.status is not None or not self.exited():
            return self.status
        said = await self._hear_verdict()
        status = _status(said)
        if status is None:
            status = await self.zygote.reap(self.zygote_pid)
        self._release()
        if self.status is not None:
            return self.status  # another caller collected it meanwhile
        if status is None:
            self.lost = ZYGOTE_LOST
            status = ExitStatus(returncode=-int(signal.SIGKILL), rusage=None)
        self._set_status(status)
        return self.status

    async def collect_if_alone(self) -> ExitStatus | None:
        if self.status is not None:
            return self.status
        if not self.exited():
            return None
        said = await self._hear_verdict()
        status = _status(said) if said.get("alone") is True else None
        if status is None:
            return None  # the zombie stays until the sweep is done (`collect`)
        self._release()
        if self.status is None:
            self._set_status(status)
        return self.status

    async def _hear_verdict(self) -> dict[str, Any]:
        """What the zygote said of the exited child (once read, kept); empty when it said
        nothing within `REPLY_SECONDS`, has no verdict socket, or is gone."""
        if self._verdict is not None:
            return self._verdict
        sock, said = self._verdict_sock, b""
        if sock is not None:
            with anyio.move_on_after(REPLY_SECONDS) as waited:
                while True:
                    try:
                        said = sock.recv(MAX_MESSAGE)
                    except BlockingIOError:
                        await anyio.wait_readable(sock)
                        continue
                    except OSError:
                        said = b""
                    break
            if waited.cancelled_caught:
                # Its child has exited, and it says nothing: a stalled zygote, given up as one
                # that does not answer a request (its `reap` then fails at once: lost).
                zygote = self.zygote
                zygote._break(f"the zygote did not tell a child's end within {REPLY_SECONDS:g}s")
                zygote.proc.send_signal(signal.SIGKILL)
        try:
            got = json.loads(said) if said else {}
        except ValueError:
            got = {}
        self._verdict = got if isinstance(got, dict) else {}
        return self._verdict

    def _release(self) -> None:
        """Close our end of the verdict socket: the tree is judged, the zygote may reap."""
        sock, self._verdict_sock = self._verdict_sock, None
        if sock is not None:
            anyio.notify_closing(sock)
            sock.close()

    def close_pipes(self) -> None:
        super().close_pipes()
        self._release()
