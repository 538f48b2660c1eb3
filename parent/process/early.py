"""A zygote launched before a program's imports: `tether.prelaunch()`.

`tether run` spends ≈ 0.18 s importing the command line and the supervisor before the run's
plan launches the zygote (`SupervisorCore._head_start`), and the zygote then takes ≈ 0.15 s to
import the child runtime: the first run waits for their sum. So does a program of its own that
imports tether and runs once. `prelaunch` launches the zygote first instead, so that the two
imports run side by side on two cores, and `Zygote.launch` takes it (`take_early`) when it
would start one with the same environment and standby delay: it is the very process a
supervisor would have launched then (`zygote_command`, through the trampoline as every child:
its own session, PR_SET_PDEATHSIG tied to the calling thread, a tree marker, the scrubbed
environment), only started sooner. The supervisor that takes it tells its keeper, as it does
for a zygote it launches. `tether._command` calls it for a subcommand whose runs a zygote forks;
a program calls it as its first line (`tether.prelaunch`, docs/architecture.md).

A zygote launched early and not taken (no run wanted one, or the environment changed
meanwhile) is killed with anything it forked and reaped when the process exits (`atexit`); if
the process is killed, or the thread that launched it ends, PR_SET_PDEATHSIG kills it (a run
then finds it dead and launches its own). This module runs before the libraries are loaded, so
it imports the standard library and tether modules that import nothing else (`start`,
`zygote_command`, `markers`, `env`, `pipes`, `tether.contain`; a test lists them). A failure
to launch is left to the run's own launch, which reports it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
from dataclasses import dataclass

from tether.contain.inplace import runs_in_place
from tether.parent.process.env import build_child_env
from tether.parent.process.start import start, trampoline_config
from tether.parent.process.zygote_command import STANDBY_AFTER, zygote_spec

REAP_SECONDS = 2.0
"""How long a zygote not taken may take to be reaped after its SIGKILL."""


@dataclass(frozen=True)
class EarlyZygote:
    """A zygote process launched early, and what it was launched with."""

    popen: subprocess.Popen[bytes]
    pipes: tuple[int, int, int]
    """Our ends of its stdin, stdout and stderr."""
    sock: socket.socket
    """The supervisor's end of its control socket."""
    env: dict[str, str]
    """Its environment as `Zygote.launch` is given one: before its marker and padding."""
    standby_after: float | None


_waiting: list[EarlyZygote] = []


def prelaunch() -> None:
    """Launch the zygote now, for this process's first run to take; nothing when one waits
    already, or when it cannot be started (the run's own launch then says why).

    Call it first, from the thread that will run the event loop (the main one as a rule),
    before the program's imports: the zygote imports the child runtime meanwhile. It serves a
    run that forks from the zygote (the default) in the environment the process has now; one
    no run takes waits until the process exits, and goes then."""
    if _waiting:
        return
    env = build_child_env(os.environ)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        spec = zygote_spec(env, theirs.fileno(), STANDBY_AFTER)
        config = trampoline_config(spec)
        popen, pipes = start(spec, config, spec.pass_fds, in_place=runs_in_place(spec.argv))
    except OSError:
        ours.close()
        return
    finally:
        theirs.close()
    _waiting.append(EarlyZygote(popen, pipes, ours, env, STANDBY_AFTER))
    atexit.unregister(discard)  # once, however many times a process launches one
    atexit.register(discard)


def take_early(env: dict[str, str], standby_after: float | None) -> EarlyZygote | None:
    """The zygote launched early, when it was launched with `env` and `standby_after` and
    still runs (it is then the caller's); one that does not fit is discarded."""
    while _waiting:
        early = _waiting.pop()
        if early.env == env and early.standby_after == standby_after and _running(early):
            return early
        _discard(early)
    return None


def discard() -> None:
    """Kill and reap every zygote launched early and not taken."""
    while _waiting:
        _discard(_waiting.pop())


def _running(early: EarlyZygote) -> bool:
    # WNOWAIT: a zygote that died stays unreaped, so its pid names nothing else until `_discard`.
    with contextlib.suppress(ChildProcessError):
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, early.popen.pid, flags) is None
    return False


def _discard(early: EarlyZygote) -> None:
    early.sock.close()
    # The zygote leads its own session and group, its standby included; the pid is still ours
    # (unreaped), so it names no other process.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(early.popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        early.popen.wait(timeout=REAP_SECONDS)
    for fd in early.pipes:
        os.close(fd)


def probe_host_meanwhile() -> None:
    """Try the host's sandbox now, in a thread of its own, for the first run's plan to find the
    answer made (`isolation.probe_host_in_thread`: once per process, and a plan that asks while
    the trial runs waits for it instead of running its own). Its trial child (≈ 45 ms) then
    runs while the command builds its parser, imports anyio's event loop backend and opens its
    supervisor, instead of after. Called once the command line is imported, the probe's module
    with it, so that no import runs in two threads at once. The thread is not a daemon: a
    command that ends first waits for the trial, which is bounded (`isolation.TRIAL_SECONDS`),
    and leaves no scratch directory behind."""
    from tether.parent.process.isolation import probe_host_in_thread

    probe_host_in_thread("tether-host-probe")
