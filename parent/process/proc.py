"""Spawning one child process and watching it: pipes as raw fds, exit seen through a pidfd.

The process is started through the trusted trampoline (`tether/contain/trampoline.py`) in its
own session and process group. Exit is detected by the pidfd becoming readable (or, without
pidfd support, by polling `waitid(WNOHANG | WNOWAIT)`), never by a wait that also waits for
the pipes: a grandchild that holds the child's stdout must not delay the result. The child is
reaped with `wait4` on its own pid, never `waitpid(-1)`, which also yields its rusage for
classification, and only after its tree has been swept (see `exited`). Signals go through the
pidfd, so a recycled pid can never be signalled by mistake.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from dataclasses import dataclass

import anyio

from tether.contain.sequence import EXEC_FAILED
from tether.parent.process.isolation import sealer_fd, trampoline_in_place
from tether.parent.process.start import SpawnSpec, open_pidfd, start, trampoline_config
from tether.wire.streams import FdReceiveStream, FdSendStream

EXEC_FAILED_MARKER = EXEC_FAILED
_POLL_INTERVAL = 0.005


class SpawnError(Exception):
    """The child could not be started at all (command missing, not executable, bad cwd)."""


@dataclass
class ExitStatus:
    returncode: int
    """Exit code, or minus the signal number (Popen convention)."""
    rusage: resource.struct_rusage | None

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode < 0 else None

    @property
    def exit_code(self) -> int | None:
        return self.returncode if self.returncode >= 0 else None

    @property
    def cpu_seconds(self) -> float:
        if self.rusage is None:
            return 0.0
        return self.rusage.ru_utime + self.rusage.ru_stime


class ChildProcess:
    """One spawned child: its pid, pidfd, three pipe ends and, once reaped, its exit status."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes] | None,
        stdin: int,
        stdout: int,
        stderr: int,
        *,
        pid: int | None = None,
        pidfd: int | None = None,
    ):
        self._popen = popen
        self.pid = popen.pid if popen is not None else pid if pid is not None else -1
        self.pgid = self.pid  # the child leads its own session and group
        self.pidfd = pidfd if pidfd is not None else open_pidfd(self.pid)
        """Adopted when given (`pidfd`: this process's, now owned here), else opened."""
        self.lost: str | None = None
        """Why the exit status is unknown, when it is and the reason is known."""
        self.stdin = FdSendStream(stdin, grow=True)
        self.stdout = FdReceiveStream(stdout, grow=True)
        self.stderr = FdReceiveStream(stderr)
        self.status: ExitStatus | None = None
        self._pidfd_waiter = False
        self._wake: anyio.Event | None = None

    @classmethod
    def spawn(cls, spec: SpawnSpec) -> ChildProcess:
        """Start the child. Must run on the event loop's thread: PR_SET_PDEATHSIG fires when
        the spawning *thread* exits, so spawning from a short-lived worker thread would kill
        the child as soon as that thread ends."""
        config = trampoline_config(spec)
        pass_fds = spec.pass_fds
        plan = spec.plan or {}
        if plan.get("local_sockets") and plan.get("private_mounts"):
            sealer = sealer_fd()  # made once; the child closes its copy before its sandbox
            if sealer is not None:
                config["sealer"] = sealer
                pass_fds = (*pass_fds, sealer)
        in_place = trampoline_in_place(spec.argv, spec.plan)
        try:
            popen, ours = start(spec, config, pass_fds, in_place=in_place)
        except OSError as exc:
            raise SpawnError(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}") from exc
        return cls(popen, *ours)

    # --- exit ---------------------------------------------------------------------------------

    def exited(self) -> bool:
        """Whether the child has exited, without reaping it.

        The child stays a zombie until `reap()`, so its pid (which is also its session and
        group id) cannot be recycled while the tree is still being swept.
        """
        if self.status is not None:
            return True
        try:
            got = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            # Someone else reaped it (a foreign waitpid(-1)); its status is lost.
            self._set_status(ExitStatus(returncode=-int(signal.SIGKILL), rusage=None))
            return True
        return got is not None

    def reap(self) -> ExitStatus | None:
        """Collect the exit status and rusage of an exited child; `None` while it runs."""
        if self.status is not None:
            return self.status
        if not self.exited():
            return None
        try:
            _, wstatus, rusage = os.wait4(self.pid, 0)
        except ChildProcessError:
            self._set_status(ExitStatus(returncode=-int(signal.SIGKILL), rusage=None))
        else:
            self._set_status(ExitStatus(os.waitstatus_to_exitcode(wstatus), rusage))
        return self.status

    async def collect(self) -> ExitStatus | None:
        """`reap()`, for a caller that can wait: a child this process did not start itself
        (`ZygoteProcess`) is reaped by whoever did, who has to be asked."""
        return self.reap()

    async def collect_if_alone(self) -> ExitStatus | None:
        """The exit status, the child let go to be reaped, when its reaper shows that nothing
        it started outlived it (so its tree needs no sweep); `None` when that cannot be told,
        and the child is left unreaped for the sweep. Only a child whose reaper is its
        children's subreaper can tell (`ZygoteProcess`); this process is not one (it is the
        user's)."""
        return None

    def _set_status(self, status: ExitStatus) -> None:
        self.status = status
        if self._popen is not None:
            self._popen.returncode = status.returncode  # Popen must not try to reap it again
        if self.pidfd is not None:
            anyio.notify_closing(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None

    async def wait(self) -> None:
        """Wait for the child itself to exit (not for its pipes to close); does not reap.

        Any number of tasks may wait at once (the exit watch and the dispose ladder do): one of
        them parks on the pidfd, which allows a single reader, and wakes the others when it
        returns, for any reason, so one of them takes over if it was cancelled.
        """
        while not self.exited():
            if self.pidfd is None:
                await anyio.sleep(_POLL_INTERVAL)
            elif self._pidfd_waiter:
                if self._wake is None:
                    self._wake = anyio.Event()
                await self._wake.wait()
            else:
                self._pidfd_waiter = True
                try:
                    await anyio.wait_readable(self.pidfd)
                except (anyio.ClosedResourceError, OSError):
                    await anyio.sleep(_POLL_INTERVAL)
                finally:
                    self._pidfd_waiter = False
                    wake, self._wake = self._wake, None
                    if wake is not None:
                        wake.set()

    async def wait_for(self, seconds: float) -> bool:
        """Wait up to `seconds` for the child to exit; return whether it has."""
        if self.exited():
            return True  # (no timer to set: a dead child's dispose asks first)
        with anyio.move_on_after(seconds):
            await self.wait()
        return self.exited()

    # --- signals ------------------------------------------------------------------------------

    def send_signal(self, sig: int) -> None:
        """Signal the child itself, never a recycled pid: through the pidfd while it lives."""
        if self.status is not None:
            return  # reaped: the pid may belong to someone else now
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def signal_group(self, sig: int) -> None:
        """Signal the child's whole process group at once (one `kill(-pgid)`, so a process that
        forks and exits as fast as it can is caught too). Only until the child is reaped: while
        its zombie lives, its pid, which is also the group id, cannot be reused."""
        if self.status is not None:
            return
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close_pipes(self) -> None:
        self.stdin.close()
        self.stdout.close()
        self.stderr.close()
