"""Containment that survives the supervisor: a keeper process per `Supervisor`.

Why: when the supervisor's process dies without running any more code (SIGKILL, a crash, the
OOM killer), PR_SET_PDEATHSIG kills each child, but nothing kills the child's own children:
the kernel clears the death signal in every fork, and a dying child cannot pass it on. They
are reparented and run on, holding whatever they held.

How: the supervisor starts `_keeper.py` in a session of its own and keeps the only write end
of a pipe to its stdin (close-on-exec, so children never inherit it). The kernel closes that
end however the supervisor dies, so end of input without a `bye` line is the keeper's signal to
SIGKILL everything carrying one of the supervisor's tree markers, and everything in the
sessions, process groups and cgroups of the children the supervisor registered. A supervisor
that closes normally says `bye` and waits for the keeper to exit.

Limits: on the process-group tier, a process that both scrubbed its environment and left its
session is not found (on a cgroup tier its cgroup still holds it). A process forked from the
supervisor's process (without exec) inherits the write end and delays the keeper until it
exits too. Registration is best effort: if the pipe is full or the keeper is gone, the tree
markers still work.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import anyio

from tether.parent.process.markers import TREE_ENV, marker_prefix
from tether.parent.process.start import open_pidfd

KEEPER = Path(__file__).with_name("_keeper.py")


class Keeper:
    """The supervisor's side of the keeper: register children, and say goodbye on close."""

    def __init__(self, proc: subprocess.Popen[bytes], fd: int) -> None:
        self.proc = proc
        self._fd: int | None = fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(cls) -> Keeper | None:
        """Start the keeper; `None` if it cannot be started (containment then relies on the
        supervisor staying alive long enough to dispose its children)."""
        r, w = os.pipe2(os.O_CLOEXEC)
        env = {"PATH": os.defpath}
        if TREE_ENV in os.environ:
            # A supervisor that is itself a tether child: its own tree marker keeps the keeper
            # inside the outer tree, so the outer supervisor can take it down too.
            env[TREE_ENV] = os.environ[TREE_ENV]
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(KEEPER), f"{TREE_ENV}={marker_prefix()}"],
                stdin=r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                close_fds=True,
                start_new_session=True,
            )
        except OSError:
            os.close(w)
            return None
        finally:
            os.close(r)
        os.set_blocking(w, False)
        return cls(proc, w)

    def watch(self, pid: int, cgroup_procs: Sequence[str] = ()) -> None:
        """A child was spawned: on the supervisor's death, kill its session, group and cgroups
        too."""
        self._say(" ".join([f"+{pid}", *cgroup_procs]) + "\n")

    def forget(self, pid: int) -> None:
        """That child has been reaped: its pid may be reused."""
        self._say(f"-{pid}\n")

    def _say(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, line.encode())
        except OSError:
            pass  # best effort: a full pipe or a dead keeper; the tree markers remain

    async def aclose(self, grace: float = 2.0) -> None:
        """Tell the keeper the supervisor is closing normally and wait for it to exit: on its
        pidfd, which wakes us the moment it does (a poll every 2, 4, 8 ms... saw a keeper that
        exited ≈ 3 ms after `bye` only at the next poll, 6 ms; every supervisor's close waits
        for it)."""
        pidfd = open_pidfd(self.proc.pid) if self.proc.returncode is None else None
        try:
            if self._fd is not None:
                self._say("bye\n")
                os.close(self._fd)
                self._fd = None
            if pidfd is not None:
                with anyio.move_on_after(grace):
                    await anyio.wait_readable(pidfd)
            else:
                deadline = time.monotonic() + grace
                delay = 0.002
                while self.proc.poll() is None and time.monotonic() < deadline:
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 0.05)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
