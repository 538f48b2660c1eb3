"""The zygote: the child runtime imported once, forked into a fresh child per request.

Run as `python -I -m tether.child.zygote FD` by the supervisor (through its trampoline, so the
zygote has its own session, PR_SET_PDEATHSIG tied to the supervisor, and the keeper's watch).
FD is one end of a `SOCK_SEQPACKET` unix socket pair; one message per datagram, JSON:

    zygote → parent  {"ready": PID, "envBytes": N}    once, when the imports are done
    parent → zygote  {"op": "spawn", "env": {...}, "rlimits": {NAME: [soft, hard]},
                      "cgroupProcs": [path, ...], "cwd": DIR, "argv": [extra, ...],
                      "claims": NAME?, "nextCgroup": {"id": NAME, "procs": [path, ...]}?}
                     with four fds (SCM_RIGHTS): the child's stdin, stdout, stderr, and
                     the zygote's end of the child's verdict socket (`tether.child.verdicts`)
    zygote → parent  {"pid": PID, "standby": BOOL} with one fd: the child's pidfd,
                     or {"error": TEXT}
    parent → zygote  {"op": "release", "claims": NAME}
    zygote → parent  {"released": NAME}
    parent → zygote  {"op": "reap", "pid": PID}
    zygote → parent  {"pid": PID, "returncode": RC, "utime": S, "stime": S, "maxrss": KB}
                     or {"error": TEXT}
    parent → zygote  {"op": "standby"}
    zygote → parent  {"pid": PID or null, "parked": BOOL, "lost": N}

End of input (the supervisor closed its end, or died) ends the zygote; children still running
then die of their PR_SET_PDEATHSIG.

The standby. A fork on request puts the fork itself (≈ 1 ms for the zygote's page tables) and
the child's first touch of every shared page it writes (reference counts: a copy of each page,
≈ 1.5 ms on the way to `initialize` and as much again in the first run) on the spawn's path.
So once the zygote has had no request for STANDBY_AFTER seconds (argv[2]; "off": never;
STANDBY_SOON while spawns come back to back) it forks one child ahead, the standby, which
knows nothing of any request yet: it puts /dev/null on fds 0-2 and closes every other fd but
its end of a private socket pair, arms its death signal against the zygote, rehearses a
session (`_rehearse`, copying the pages a session writes), says `parked` and waits. A spawn
request that finds it parked is handed to it whole (the same JSON and the three fds, over
that socket pair) and answered with its pid at once; from there it runs exactly the sequence
of a child forked on request (`_become_child`: environment, working directory, cgroups,
session, death signal, rlimits, signals, sandbox), so nothing of a request is decided before
the request exists. A request that finds no standby is forked as before. A standby that dies
while waiting is reaped here (it was never a child the supervisor knew); after MAX_LOST such
deaths in a row no more are forked.

The standby's cgroup. Joining a cgroup waits for the kernel's migration lock, and on a stock
host its writer waits for an RCU grace period (7-30 ms), so the join is made ahead too: with
each spawn the supervisor may name a cgroup it made for the next standby (`nextCgroup`, no
limits yet), which that standby joins before its rehearsal. At the next spawn the supervisor
writes the child's limits into that cgroup before the request is sent (the child's cgroup
keeps the standby cgroup's name: cgroup v2 renames nothing), and the request `claims` it: a
parked standby in it is handed the request and joins nothing. A standby in it that has not
parked yet (its join or its rehearsal still under way) is handed the request too, and the
zygote waits until it says it has it (TAKE_WITHIN at most): after its join it looks for a
request before it rehearses, and goes to one it finds at once (`took`). One that does not
answer in time (stopped, or gone) is taken down, since the child is to have the cgroup to
itself, and the child is forked into it. Runs back to back (one every ≈ 10-15 ms) thus each
get a standby whose fork and join were made during the run before: a standby needs longer
than that to park, and taking it down to fork the child in its place put both a fork and a
join on each such spawn's path. `release` takes down the standby of a cgroup the supervisor
claimed and then did not use.

The zygote is single-threaded and runs no event loop (a fork copies only the calling thread, so
a lock held by another thread would stay locked in the child forever). It never reaps on its
own what it forked: SIGCHLD has a handler that does nothing but wake its poll (never the
ignore disposition, with which the kernel would reap), and a child stays a zombie, its pid
(also its session and group id) held, until the supervisor has swept the child's tree and
closes the child's verdict socket (or asks `reap`). Only the processes it did not fork are
reaped unasked, the moment one dies (`_reap_strays`, on each SIGCHLD and each `reap`): a
zombie is charged to its tree's cgroup, so one held here would count against that tree's
process limit.

The zygote is its children's subreaper (`PR_SET_CHILD_SUBREAPER`): a process a child started
that outlives its parent is made the zygote's child, not init's (so is one a child made with
`CLONE_PARENT`). The kernel does that before the dead parent becomes a zombie, so once a
child's exit shows, everything it started that still runs is the zygote's child or a
descendant of one: when the zygote's children are only those it forked (given out, or its
standby), nothing of the dead child's tree is alive anywhere. The child's verdict says so the
moment it exits (`tether.child.verdicts`): the supervisor then needs no pass over /proc to
judge the tree (`tether.parent.process.supervised`); otherwise it sweeps as always. Either way
the child stays a zombie until the supervisor closes its end of the verdict socket.

In the forked child, before any child code runs: the pipe ends go to fds 0/1/2 and every other
fd is closed (the control socket included); the environment is replaced entirely, both libc's
and the block `/proc/PID/environ` shows (the zygote was started with a padding variable so the
block has room); the working directory; then the same contained sequence as the exec
trampoline (`tether.contain.sequence.contain`: cgroups, `setsid()`, PR_SET_PDEATHSIG=SIGKILL
and the check that the zygote is still its parent, rlimits, signal dispositions and mask as a
freshly started interpreter has them, and the sandbox of the request's plan); then the wire is
claimed (`fdguard`) and the child runtime's main runs.

The zygote itself runs at the process level (it must be able to build each child's sandbox)
and makes itself non-dumpable, so no child, sandboxed or not, can read or trace it.
"""

from __future__ import annotations

# Run as the zygote (`python -I -m tether.child.zygote`), no cyclic collection while the
# runtime imports (each of the ≈ 30 an import of this size sets off walks a young generation
# of objects that all live for good): `main` freezes what they built, then turns the collector
# back on for the rehearsal (`_settle`). Imported as a module (tests), nothing changes.
import gc

if __name__ == "__main__":
    gc.disable()

import contextlib
import ctypes
import functools
import json
import math
import os
import select
import signal
import socket
import sys
import time
from typing import Any

# Everything a child runs, imported once here and shared copy-on-write with every child.
import anyio
import anyio._backends._asyncio  # anyio.run would import it in every child

import tether.child.agent
import tether.child.dispatch
import tether.child.loop
import tether.child.runs
import tether.child.tools
import tether.child.workspace
import tether.contain.landlock
import tether.contain.mounts
import tether.contain.seccomp  # the sandbox of every forked child
from tether.child import entry, fdguard
from tether.child.verdicts import Verdicts
from tether.contain._sys import libc
from tether.contain.plan import Plan
from tether.contain.privileges import set_child_subreaper, set_dumpable
from tether.contain.sequence import (
    arm_death_signal,
    contain,
    join_cgroups,
    local_sockets,
    workspace_idmap,
)

SETUP_FAILED = 126
MAX_MESSAGE = 1 << 20
STANDBY_AFTER = 0.025
"""Seconds without a request after which a standby is forked (argv[2] overrides it)."""
STANDBY_SOON = 0.002
"""The same delay, capped by STANDBY_AFTER, while spawns come back to back (the last two less
than BACK_TO_BACK apart): a run that ends within STANDBY_AFTER would otherwise never find a
standby. Not always: a standby's rehearsal takes a core from the run just started, which
costs runs further apart more (≈ 2-3 ms of a 13 ms sandboxed run) than the standby saves."""
BACK_TO_BACK = 0.05
TAKE_WITHIN = 0.5
"""Seconds a standby that has not parked yet has to take a request handed to it (it may be in
its cgroup join, an RCU grace period of 7-30 ms on a stock host, or in its rehearsal); past
it, it is taken down and the child forked."""
MAX_LOST = 3
"""Standbys that may die while waiting, in a row, before the zygote stops forking them."""
PARKED = b"parked"
TOOK = b"took"
PAD_ENV = "TETHER_ZYGOTE_ENV_AREA"
"""A variable the supervisor pads the zygote's environment with: its block is what a child's
`/proc/PID/environ` shows once rewritten, so it must be large enough for any child's."""

MAX_USERNS = 8
"""User namespaces kept for idmapped workspaces, one per mapping (see `_userns_for`)."""

_userns: dict[tuple[int, int, int, int], int] = {}
_sealer: list[int] = []


@functools.cache
def _environ_area() -> tuple[int, int]:
    """Start and end address of this process's environment block (what /proc/PID/environ
    reads): fields 50 and 51 of /proc/self/stat. Read once, in the zygote: a forked child has
    the same block at the same addresses."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[50 - 3]), int(fields[51 - 3])


def _replace_environment(env: dict[str, str]) -> None:
    block = b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items())
    start, end = _environ_area()
    if len(block) > end - start:
        raise OSError(f"the environment ({len(block)} bytes) exceeds the zygote's area")
    # libc's environment first: afterwards nothing points into the old block any more.
    _clear_environment()
    os.environ.update(env)  # setenv copies each value
    ctypes.memmove(start, block + b"\0" * (end - start - len(block)), end - start)


def _clear_environment() -> None:
    """Python's environment mapping and libc's, both emptied."""
    os.environ.clear()
    if libc.clearenv() != 0:
        raise OSError(ctypes.get_errno(), "clearenv failed")


def _get_set() -> None:
    """What a standby does before it parks that any request would have it do: let go of the
    zygote's environment (Python's mapping and libc's: `_replace_environment` then has nothing
    to clear), write the block /proc/PID/environ shows over with itself, and configure the
    child's logging. Each of those writes first copies a page the standby shares with the
    zygote; done here, none of it is on a spawn's path (≈ 0.4 ms there). The block keeps its
    bytes: a parked standby still shows the zygote's environment, tree marker included."""
    _clear_environment()
    start, end = _environ_area()
    ctypes.memmove(start, ctypes.string_at(start, end - start), end - start)
    entry.configure_logging()


def _userns_for(request: dict[str, Any]) -> int | None:
    """An fd of a user namespace with the mapping a sandboxed request's idmapped workspace
    needs; `None` when it needs none, or it could not be made (the child then makes its own,
    and reports what failed).

    Made here once per mapping and kept: a child that made its own forked a helper from the
    zygote's whole address space and waited for it to exit (≈ 3.3 ms of every sandboxed
    spawn). The namespace holds no process, only the mapping; the fd goes to each child that
    needs it (a 4th fd), which closes it before its sandbox is complete."""
    plan = request.get("plan")
    if not plan:
        return None
    try:
        idmap = workspace_idmap(Plan.from_json(plan))
    except (AttributeError, TypeError, ValueError, KeyError):
        return None  # the child reads the plan again, and says what is wrong with it
    if idmap is None:
        return None
    fd = _userns.get(idmap)
    if fd is None:
        try:
            fd = tether.contain.mounts.idmap_userns(*idmap)
        except OSError:
            return None
        if len(_userns) >= MAX_USERNS:
            oldest = next(iter(_userns))
            os.close(_userns.pop(oldest))
        _userns[idmap] = fd
    return fd


def _sealer_for(request: dict[str, Any]) -> int | None:
    """An fd of `mounts.unmapped_userns()`'s namespace when the request's sandbox seals its
    private mounts; made here once and kept, as `_userns_for` keeps its own (`None`: not
    needed, or it could not be made and the child makes its own)."""
    try:
        plan = Plan.from_json(request.get("plan"))
    except (AttributeError, TypeError, ValueError, KeyError):
        return None
    if not (plan.private_mounts and local_sockets(plan)):
        return None
    if not _sealer:
        try:
            _sealer.append(tether.contain.mounts.unmapped_userns())
        except OSError:
            return None
    return _sealer[0]


def _extra_fds(request: dict[str, Any]) -> tuple[list[int], list[str]]:
    """The user namespaces a request's child gets beside its stdio, and their roles (what
    the child reads from `extraFds`)."""
    extra: list[int] = []
    roles: list[str] = []
    for role, fd in (("userns", _userns_for(request)), ("sealer", _sealer_for(request))):
        if fd is not None:
            extra.append(fd)
            roles.append(role)
    return extra, roles


def _become_child(
    request: dict[str, Any], fds: list[int], zygote: int, joined: str | None = None
) -> None:
    """Set up the forked child and run the child runtime in it; never returns. `fds`: its
    stdin, stdout and stderr, then the user namespaces the request's `extraFds` names
    (`_extra_fds`).
    `joined`: the standby cgroup this process is in already (a standby's); when the request
    claims it, the supervisor has made it this child's, and there is nothing to join."""
    try:
        _forget_deaths()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        # The namespaces the zygote made ahead, each at 3 + its place in `extraFds`.
        roles = list(request.get("extraFds") or (["userns"] if len(fds) > 3 else []))
        extra = {role: 3 + i for i, role in enumerate(roles[: len(fds) - 3])}
        for target in extra.values():
            os.dup2(fds[target], target)
        os.closerange(3 + len(extra), os.sysconf("SC_OPEN_MAX"))
        _replace_environment(request["env"])
        os.chdir(request.get("cwd") or "/")
        here = joined is not None and request.get("claims") == joined
        contain(
            cgroup_procs=[] if here else request.get("cgroupProcs", []),
            setsid=True,
            ppid=zygote,
            rlimits=request.get("rlimits", {}),
            for_exec=False,
            plan=Plan.from_json(request.get("plan")),
            userns=extra.get("userns"),  # both closed by contain
            sealer=extra.get("sealer"),
        )
        argv = list(request.get("argv", []))
        sys.argv = ["tether.child", *argv]
        # The objects the zygote froze stay frozen here: the child's full collections then
        # never walk them (a walk writes every object's header, copying most of the shared
        # heap into this child). They are the imported runtime, alive for good anyway.
    except BaseException as exc:
        try:
            os.write(2, f"tether-zygote: child setup failed: {exc}\n".encode())
        finally:
            os._exit(SETUP_FAILED)
    try:
        entry.run(fdguard.claim_wire(), argv)
    finally:
        os._exit(1)


def _reap_strays(me: int, ours: set[int]) -> bool:
    """Reap the zygote's children that it did not fork: processes its children started that
    outlived their parent (the zygote is their subreaper), or made with `CLONE_PARENT` (the
    sandbox refuses it). As the zygote waits only for what it forked, each would otherwise stay
    a zombie here for the zygote's life. Those still running are left to their tree's sweep.
    Whether none of them is still running, as far as the zygote can tell: `False` also when
    the list cannot be read (`/proc/PID/task/PID/children`, the zygote is one thread; a kernel
    without `CONFIG_PROC_CHILDREN` has none) or the zygote is nobody's subreaper."""
    try:
        fd = os.open(f"/proc/{me}/task/{me}/children", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        listed = _read_all(fd)
    except OSError:
        return False
    finally:
        os.close(fd)
    none_left = _SUBREAPER
    for raw in listed.split():
        pid = int(raw)
        if pid not in ours:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    none_left = False  # still running
            except ChildProcessError:
                pass
    return none_left


def _hear_deaths() -> int | None:
    """A descriptor that turns readable whenever a child of the zygote changes state: SIGCHLD
    gets a handler that does nothing (a disposition other than ignore: the kernel reaps
    nothing on its own) and Python's wakeup descriptor. Every forked process undoes both first
    (`_forget_deaths`). `None` where it cannot be had (the zygote then reaps strays only with
    each `reap`)."""
    try:
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _noted)
    except (OSError, ValueError):
        signal.set_wakeup_fd(-1)
        os.close(r)
        os.close(w)
        return None
    return r


def _noted(signum: int, frame: object) -> None:
    """SIGCHLD's handler in the zygote: the wakeup descriptor carries the news."""


def _forget_deaths() -> None:
    """In a process the zygote forked, before anything else: no wakeup descriptor (its number
    is closed here and may be reused: a signal would write a byte into whatever took it) and
    SIGCHLD's default disposition."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def _read_all(fd: int) -> bytes:
    parts = []
    while part := os.read(fd, 1 << 16):
        parts.append(part)
    return b"".join(parts)


_SUBREAPER = False
"""Whether this zygote is its children's subreaper (`main` makes it one where it can)."""


def _become_subreaper() -> None:
    global _SUBREAPER
    try:
        set_child_subreaper()
    except OSError:
        return
    _SUBREAPER = True


def _reap(pid: int) -> dict[str, Any]:
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return {"error": f"{pid} is not a child of the zygote"}
    return {
        "pid": pid,
        "returncode": os.waitstatus_to_exitcode(status),
        "utime": usage.ru_utime,
        "stime": usage.ru_stime,
        "maxrss": usage.ru_maxrss,
    }


class _Standby:
    """The zygote's view of its standby: its pid and the zygote's end of their socket pair."""

    def __init__(self, pid: int, sock: socket.socket, cgroup: str | None) -> None:
        self.pid = pid
        self.sock = sock
        self.parked = False
        self.cgroup = cgroup
        """The standby cgroup it joined (its name), if the supervisor had given one."""


def _fork_standby(me: int, cgroup: dict[str, Any] | None) -> _Standby | None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        _stand_by(theirs, me, cgroup)  # never returns
    theirs.close()
    ours.setblocking(False)
    return _Standby(pid, ours, cgroup["id"] if cgroup is not None else None)


def _stand_by(sock: socket.socket, zygote: int, cgroup: dict[str, Any] | None) -> None:
    """The standby: get ready for a request nobody has made yet, wait, then become the child
    the request asks for. Never returns. `cgroup`: the standby cgroup the supervisor made
    (`{"id": NAME, "procs": [FILES]}`), joined here, ahead of the request: the join waits for
    the kernel's migration lock (an RCU grace period, 7-30 ms on a stock host), and the
    supervisor makes this cgroup the child's at the request, its limits written in."""
    try:
        _forget_deaths()
        keep = sock.fileno()
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        # Nothing of the zygote's stays open here: not its control socket, not its stdio.
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        arm_death_signal(zygote)
        if cgroup is not None:
            join_cgroups(cgroup["procs"])
        # A request handed over while this standby was still on its way (its join) is taken
        # at once, without the rehearsal. (`recv_fds` ignores its flags in Python 3.11, so
        # no MSG_DONTWAIT: a readable socket holds the request, or the zygote's goodbye.)
        early = _readable(sock, 0)
        if not early:
            _rehearse()
            _get_set()
            sock.send(PARKED)
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 5)
        if not data:
            os._exit(0)  # the zygote let it go
        if early:
            sock.send(TOOK)
        request = json.loads(data)
    except BaseException:
        os._exit(SETUP_FAILED)
    if len(fds) not in (3, 4, 5):
        os._exit(SETUP_FAILED)
    _become_child(request, fds, zygote, cgroup["id"] if cgroup is not None else None)


def _readable(sock: socket.socket, seconds: float) -> bool:
    """Whether `sock` has something to read (or its peer is gone) within `seconds`; poll, not
    select, which cannot watch a descriptor numbered 1,024 or more."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(math.ceil(seconds * 1000)))


def _lose(standby: _Standby) -> None:
    """Take a standby down and reap it (it was never handed to the supervisor)."""
    with contextlib.suppress(OSError):
        os.kill(standby.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(standby.pid, 0)
    standby.sock.close()


def _hear_standby(standby: _Standby, *also: bytes) -> bool:
    """Take what the standby said (`parked`, or end of stream when it died); whether it is
    still there. `also`: other words that count as `parked` (`took`, once it was handed a
    request)."""
    while True:
        try:
            said = standby.sock.recv(64)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if said != PARKED and said not in also:
            return False
        standby.parked = True


def serve(sock: socket.socket, standby_after: float | None = STANDBY_AFTER) -> None:
    me = os.getpid()
    start, end = _environ_area()
    sock.send(json.dumps({"ready": me, "envBytes": end - start}).encode())
    standby: _Standby | None = None
    lost = 0
    standby_cgroup: dict[str, Any] | None = None
    """The cgroup the supervisor made for the next standby: `{"id": NAME, "procs": FILES}`."""
    given_out: set[int] = set()
    """The children whose pid the supervisor has, until it asks to reap them."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)

    def forked() -> set[int]:
        return given_out | ({standby.pid} if standby is not None else set())

    def reaped(pid: int) -> None:
        given_out.discard(pid)
        _reap_strays(me, forked())  # what its processes made the zygote's is dead too

    verdicts = Verdicts(poller, lambda: _reap_strays(me, forked()), reaped)
    died = _hear_deaths()
    if died is not None:
        poller.register(died, select.POLLIN)
    quiet_since = time.monotonic()
    last_spawn, spawn_gap = -math.inf, math.inf
    while True:
        wait = None
        if standby is None and standby_after is not None and lost < MAX_LOST:
            after = min(standby_after, STANDBY_SOON) if spawn_gap < BACK_TO_BACK else standby_after
            wait = max(0, int((quiet_since + after - time.monotonic()) * 1000))
        ready = {fd for fd, _ in poller.poll(wait)}
        if not ready:
            standby = _fork_standby(me, standby_cgroup)
            if standby is not None:
                poller.register(standby.sock, select.POLLIN)
            continue
        if died is not None and died in ready:
            # A child of the zygote changed state: what it did not fork is reaped the moment it
            # dies (a zombie it holds is charged to its tree's cgroup until reaped).
            _drain(died)
            _reap_strays(me, forked())
        for fd in ready:
            verdicts.handle(fd)
        if standby is not None and standby.sock.fileno() in ready and not _hear_standby(standby):
            poller.unregister(standby.sock)
            _lose(standby)
            standby, lost = None, lost + 1
        if sock.fileno() not in ready:
            continue
        quiet_since = time.monotonic()
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
        except (ConnectionError, OSError):
            return
        if not data:
            return
        try:
            request = json.loads(data)
            op = request["op"]
        except (ValueError, KeyError, TypeError):
            for fd in fds:
                os.close(fd)
            sock.send(b'{"error": "malformed request"}')
            continue
        claims = request.get("claims")
        if claims is not None and standby_cgroup is not None and standby_cgroup["id"] == claims:
            standby_cgroup = None  # the supervisor made it the child's
        if op == "spawn":
            spawn_gap, last_spawn = quiet_since - last_spawn, quiet_since
            reply: dict[str, Any]
            verdict = fds.pop() if len(fds) == 4 else None  # the zygote's to keep
            if len(fds) != 3:
                reply = {"error": f"a spawn needs 3 fds and a verdict socket, got {len(fds)}"}
            else:
                reply, standby, lost = _spawn(request, fds, claims, standby, lost, poller, me)
            if "pid" in reply:
                given_out.add(int(reply["pid"]))
                if verdict is not None:
                    verdicts.watch(int(reply["pid"]), verdict)
            elif verdict is not None:
                os.close(verdict)
            for fd in fds:
                os.close(fd)
            if "nextCgroup" in request:
                standby_cgroup = request["nextCgroup"]
        elif op == "release":
            if claims is not None and standby is not None and standby.cgroup == claims:
                poller.unregister(standby.sock)
                _lose(standby)
                standby = None
            reply = {"released": claims}
        elif op == "reap":
            pid = int(request["pid"])
            reply = _reap(pid)
            verdicts.forget(pid)
            reaped(pid)
        elif op == "standby":
            if standby is not None and not _hear_standby(standby):
                poller.unregister(standby.sock)
                _lose(standby)
                standby, lost = None, lost + 1
            reply = _standby_state(standby, lost)
        else:
            reply = {"error": f"unknown op {op!r}"}
        try:
            _reply(sock, reply, with_pidfd=op == "spawn")
        except OSError:
            return


def _reply(sock: socket.socket, reply: dict[str, Any], *, with_pidfd: bool) -> None:
    """Send one reply; a spawn's carries the child's pidfd when there is one (`_pidfd`)."""
    pidfd = _pidfd(reply) if with_pidfd else None
    if pidfd is None:
        sock.send(json.dumps(reply).encode())
        return
    try:
        socket.send_fds(sock, [json.dumps(reply).encode()], [pidfd])
    finally:
        os.close(pidfd)


def _pidfd(reply: dict[str, Any]) -> int | None:
    """A pidfd of the child a spawn answers with, for the supervisor: the pid the zygote knows
    is one of its own PID namespace, which the supervisor's may not be (a zygote run in a
    namespace of its own, `Zygote.launch`); through the pidfd the supervisor sees the same
    process under its own pid. `None` without a pid (an error) or pidfd support."""
    if "pid" not in reply:
        return None
    try:
        return os.pidfd_open(int(reply["pid"]))
    except (AttributeError, OSError):
        return None


def _spawn(
    request: dict[str, Any],
    fds: list[int],
    claims: Any,
    standby: _Standby | None,
    lost: int,
    poller: select.poll,
    me: int,
) -> tuple[dict[str, Any], _Standby | None, int]:
    """A spawn's reply: the standby handed the request (parked, or on its way in the cgroup the
    request claims), else a fresh fork; with the standby and the lost count as they are after
    it."""
    if standby is not None and not standby.parked:
        _hear_standby(standby)  # it may have parked since the last poll
    extra, roles = _extra_fds(request)
    given = [*fds, *extra]
    request["extraFds"] = roles
    handed = None
    claimed = claims is not None and standby is not None and standby.cgroup == claims
    if standby is not None and (standby.parked or claimed):
        # One on its way in another cgroup (or none) is left to park: the child forked here
        # joins the request's cgroups itself.
        poller.unregister(standby.sock)
        handed = _hand_over(standby, json.dumps(request).encode(), given)
        lost = 0 if handed is not None else lost + 1  # gone (or too slow): fork as if none
        standby = None
    if handed is not None:
        return {"pid": handed, "standby": True}, standby, lost
    return _fork_child(request, given, me), standby, lost


def _standby_state(standby: _Standby | None, lost: int) -> dict[str, Any]:
    """The `standby` op's reply: the standby's pid, whether it is parked, how many were lost."""
    return {
        "pid": standby.pid if standby is not None else None,
        "parked": standby is not None and standby.parked,
        "lost": lost,
    }


def _hand_over(standby: _Standby, data: bytes, fds: list[int]) -> int | None:
    """Give the request to the standby; its pid, or `None` once it is taken down and reaped
    (gone; or, not parked yet, silent for TAKE_WITHIN: it says it has the request, or that it
    parked, which it does only before it reads it)."""
    try:
        socket.send_fds(standby.sock, [data], fds)
    except OSError:
        _lose(standby)
        return None
    deadline = time.monotonic() + TAKE_WITHIN
    while not standby.parked and (left := deadline - time.monotonic()) > 0:
        if _readable(standby.sock, left) and not _hear_standby(standby, TOOK):
            break  # gone
    if not standby.parked:
        _lose(standby)
        return None
    standby.sock.close()
    return standby.pid


def _fork_child(request: dict[str, Any], fds: list[int], me: int) -> dict[str, Any]:
    try:
        pid = os.fork()
    except OSError as exc:
        return {"error": f"fork failed: {exc.strerror or exc}"}
    if pid == 0:
        _become_child(request, fds, me)
    return {"pid": pid, "standby": False}


def _warm() -> None:
    """Pay here, once, what every child would otherwise pay on its way to `initialize`: the
    first use of argparse (for a child given `--agent`: its first parser costs ≈ 15 ms of lazy
    set-up) and a whole rehearsed session (`_rehearse`). The version `initialize` reports is
    a constant already (`tether.child.session.SERVER_VERSION`)."""
    entry._agent_spec([])
    tether.child.dispatch.preload()  # children never load jsonrpcserver's dispatcher again
    _rehearse()


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


_RUN_ID = "zygote-rehearsal"
_MODEL_ANSWER = {
    "message": {
        "role": "assistant",
        "content": "done",
        "toolCalls": [
            {"id": "c1", "name": "complete", "arguments": {"summary": "ok", "paths": []}}
        ],
    },
    "usage": {"inputTokens": 1, "outputTokens": 1},
    "stopReason": "tool_use",
}


async def _play_parent(send: Any, receive: Any, workspace: str) -> bool:
    """The parent's side of the rehearsal: initialize, a ping, one `agent/run` whose single
    model turn calls `complete`, shutdown and exit. Whether the run succeeded."""
    from tether.protocol.framing import LineFramer

    await send.send(
        _line(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": 1, "clientInfo": {"name": "zygote", "version": "0"}},
            }
        )
        + _line({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}})
        + _line(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "agent/run",
                "params": {"runId": _RUN_ID, "prompt": "rehearse", "workspace": workspace},
            }
        )
    )
    framer = LineFramer()
    succeeded = False
    while True:
        for line in framer.feed(await receive.receive()):
            if not isinstance(line, bytes):
                continue
            message = json.loads(line)
            if message.get("method") == "model/complete":
                await send.send(
                    _line({"jsonrpc": "2.0", "id": message["id"], "result": _MODEL_ANSWER})
                )
            elif message.get("method") is not None and "id" in message:
                await send.send(  # the rehearsal serves nothing else
                    _line(
                        {
                            "jsonrpc": "2.0",
                            "id": message["id"],
                            "error": {"code": -32601, "message": "not in the rehearsal"},
                        }
                    )
                )
            elif message.get("id") == 3:
                succeeded = bool(message.get("result", {}).get("success"))
                await send.send(
                    _line({"jsonrpc": "2.0", "id": 4, "method": "shutdown"})
                    + _line({"jsonrpc": "2.0", "method": "exit"})
                )
                return succeeded


REHEARSAL_SECONDS = 10.0
"""A rehearsal that has not ended by then is abandoned: it only saves the children time."""
REHEARSAL_WORKSPACE = "/"
"""The rehearsed run's workspace: a directory every host has, which the run (one model turn
that calls `complete` with no paths) only resolves and never writes. Not a temporary directory
of the zygote's own: the zygote is SIGKILLed whenever its supervisor dies (its death signal),
also mid-rehearsal, and would leave one behind each time."""


def _rehearse() -> bool:
    """Serve one whole session here, over a pipe pair, before any fork: the handshake, a
    ping, and one scripted run to its `complete` (the parent's side played by
    `_play_parent`). Every first-use cost on the way (the event loop's set-up, the codec's
    typed decoders and encoders, the dispatcher's lazy state, the run table, the tool
    registry, the agent loop, the regexes and caches they fill) is then paid once and shared,
    instead of in every child: ≈ 7 ms of CPU each for the handshake alone, ≈ 3 ms more for a
    child's first run. The zygote stays single-threaded: the event loop is closed again, and
    the thread `initialize` starts to import the agent machinery (already imported here) is
    joined. Returns whether the run succeeded (a failed rehearsal costs the children time,
    nothing else)."""
    import threading

    from tether.child.server import serve_streams
    from tether.wire import FdReceiveStream, FdSendStream

    p2c_r, p2c_w = os.pipe()
    c2p_r, c2p_w = os.pipe()
    succeeded = False
    try:

        async def session() -> None:
            nonlocal succeeded
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve_streams, FdReceiveStream(p2c_r), FdSendStream(c2p_w))
                with anyio.move_on_after(REHEARSAL_SECONDS):
                    succeeded = await _play_parent(
                        FdSendStream(p2c_w), FdReceiveStream(c2p_r), REHEARSAL_WORKSPACE
                    )
                if not succeeded:
                    tg.cancel_scope.cancel()

        anyio.run(session, backend="asyncio")
    finally:
        for fd in (p2c_r, p2c_w, c2p_r, c2p_w):
            with contextlib.suppress(OSError):
                os.close(fd)
    for thread in threading.enumerate():
        if thread is not threading.current_thread():
            thread.join()
    return succeeded


def _settle() -> None:
    """Warm the runtime (`_warm`) and freeze what lives for good, so that no collection, here
    or in a child, walks it (a walk writes every object's header: a child would copy most of
    the shared heap). The imports ran with the collector off; they are frozen first, as they
    are (the cyclic garbage they left, a few hundred helper objects, stays with them, as in an
    exec'd child: `entry._end_startup`), so the collection after the rehearsal walks only what
    the rehearsal made, and the last freeze keeps what of it survives."""
    gc.freeze()
    gc.enable()
    _warm()
    gc.collect()
    gc.freeze()


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    set_dumpable(False)
    _become_subreaper()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # never auto-reap: children stay zombies
    _settle()
    after = sys.argv[2] if len(sys.argv) > 2 else str(STANDBY_AFTER)
    serve(sock, None if after == "off" else float(after))
    # Its supervisor let it go (or is gone). Nothing is left to finish: its children die of
    # their death signal, and the interpreter's own shutdown of a heap this size (every module
    # of the child runtime, frozen) would only make the supervisor's close wait ≈ 5 ms longer.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
