"""The zygote's verdicts: each child's end told to the supervisor the moment it happens.

Each spawn request may carry a fourth descriptor, one end of a socket pair the supervisor made
for that child (its verdict socket). The zygote keeps it (the child never has it) with a pidfd
of the child, both in its poll. When the pidfd turns readable (the child has exited), the zygote
reads the child's status and rusage without reaping it (`waitid` with `WNOWAIT`), asks whether
anything the child started is still alive (it is their subreaper: see `tether.child.zygote`),
and sends one datagram:

    {"pid": PID, "returncode": RC, "utime": S, "stime": S, "maxrss": KB, "alone": BOOL}

(without the status fields when it could not be read; the supervisor then asks `reap`). The
child stays a zombie, its pid, session and group id held, until the supervisor closes its end:
that is its word that the tree is judged (swept, when it was not alone). The zygote then reaps
the child. A supervisor that closes its end before the child has exited (it died, or gave the
child up) lets the zygote reap it the moment it exits.

So a dispose never waits for a request to the zygote: the verdict is written while the
supervisor is still noticing the exit on its own pidfd.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import socket
from collections.abc import Callable
from dataclasses import dataclass

P_PID = 1
WNOHANG = 1
WEXITED = 4
WNOWAIT = 0x01000000
CLD_EXITED = 1


class _SigInfo(ctypes.Structure):
    # siginfo_t for SIGCHLD on 64-bit Linux: the union starts at offset 16.
    _fields_ = (
        ("signo", ctypes.c_int),
        ("errno", ctypes.c_int),
        ("code", ctypes.c_int),
        ("_pad", ctypes.c_int),
        ("pid", ctypes.c_int),
        ("uid", ctypes.c_uint),
        ("status", ctypes.c_int),
        ("_rest", ctypes.c_byte * 100),
    )


class _TimeVal(ctypes.Structure):
    _fields_ = (("sec", ctypes.c_long), ("usec", ctypes.c_long))


class _RUsage(ctypes.Structure):
    _fields_ = (
        ("utime", _TimeVal),
        ("stime", _TimeVal),
        ("maxrss", ctypes.c_long),
        ("_rest", ctypes.c_long * 13),
    )


def peek(pid: int) -> dict[str, float | int] | None:
    """The exited child's status and rusage, the child left unreaped (`waitid` with
    `WNOWAIT`, whose rusage argument Python's `os.waitid` does not pass); `None` when they
    cannot be read (not exited yet: it never waits; not ours; an architecture tether has no
    number for)."""
    from tether.contain._sys import supported_arch, syscall

    if not supported_arch():
        return None
    info, usage = _SigInfo(), _RUsage()
    try:
        syscall(
            "waitid",
            P_PID,
            pid,
            ctypes.addressof(info),
            WEXITED | WNOHANG | WNOWAIT,
            ctypes.addressof(usage),
        )
    except OSError:
        return None
    if info.pid != pid:
        return None
    code = info.status if info.code == CLD_EXITED else -info.status
    return {
        "returncode": code,
        "utime": usage.utime.sec + usage.utime.usec / 1e6,
        "stime": usage.stime.sec + usage.stime.usec / 1e6,
        "maxrss": usage.maxrss,
    }


@dataclass
class _Watch:
    pid: int
    pidfd: int | None
    """Closed (`None`) once the child has exited."""
    sock: socket.socket | None
    """Closed (`None`) once the supervisor has closed its end."""


class Verdicts:
    """The zygote's watches (see the module docstring). `alone()`: whether none of the
    zygote's running children is one it did not fork; `reaped(pid)`: told of each child reaped
    here, so the zygote forgets it."""

    def __init__(
        self, poller: select.poll, alone: Callable[[], bool], reaped: Callable[[int], None]
    ) -> None:
        self._poller = poller
        self._alone = alone
        self._reaped = reaped
        self._by_fd: dict[int, _Watch] = {}
        self._by_pid: dict[int, _Watch] = {}

    def watch(self, pid: int, verdict_fd: int) -> None:
        """Watch child `pid` for the supervisor's end of `verdict_fd` (taken over here)."""
        sock = socket.socket(fileno=verdict_fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            sock.close()  # no verdict: the supervisor asks `reap`
            return
        sock.setblocking(False)
        watch = _Watch(pid, pidfd, sock)
        self._by_pid[pid] = watch
        for fd in (pidfd, sock.fileno()):
            self._by_fd[fd] = watch
            self._poller.register(fd, select.POLLIN)

    def handle(self, fd: int) -> bool:
        """Act on `fd` if it is one of the watches' (the poll said it is readable)."""
        watch = self._by_fd.get(fd)
        if watch is None:
            return False
        if fd == watch.pidfd:
            self._close_pidfd(watch)
            if watch.sock is None:
                self._reap(watch)  # nobody waits for a verdict
            else:
                self._tell(watch)
        elif watch.sock is not None and fd == watch.sock.fileno():
            try:
                said = watch.sock.recv(64)
            except BlockingIOError:
                return True
            except OSError:
                said = b""
            if said == b"":  # the supervisor closed its end: it has judged the tree
                self._close_sock(watch)
                if watch.pidfd is None:
                    self._reap(watch)
        return True

    def forget(self, pid: int) -> None:
        """`pid` was reaped by a `reap` request: its watch, if any, goes."""
        watch = self._by_pid.pop(pid, None)
        if watch is not None:
            self._close_pidfd(watch)
            self._close_sock(watch)

    def _tell(self, watch: _Watch) -> None:
        assert watch.sock is not None
        said: dict[str, object] = {"pid": watch.pid}
        status = peek(watch.pid)
        if status is not None:
            said.update(status)
        said["alone"] = status is not None and self._alone()
        try:
            watch.sock.send(json.dumps(said).encode())
        except OSError:
            self._close_sock(watch)  # the supervisor is gone: reap
            self._reap(watch)

    def _reap(self, watch: _Watch) -> None:
        self._by_pid.pop(watch.pid, None)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(watch.pid, 0)
        self._reaped(watch.pid)

    def _close_pidfd(self, watch: _Watch) -> None:
        if watch.pidfd is not None:
            self._by_fd.pop(watch.pidfd, None)
            self._poller.unregister(watch.pidfd)
            os.close(watch.pidfd)
            watch.pidfd = None

    def _close_sock(self, watch: _Watch) -> None:
        if watch.sock is not None:
            self._by_fd.pop(watch.sock.fileno(), None)
            self._poller.unregister(watch.sock.fileno())
            watch.sock.close()
            watch.sock = None
