"""Starting a process through the trusted trampoline, with the standard library alone.

`ChildProcess.spawn` starts every exec'd child and every zygote here; so does the `tether`
command's early zygote (`early`), before the command line's imports, which is why nothing here
imports the supervisor or its libraries. The child's stdio pipes and everything the trampoline
does before the command's first instruction are described in `proc` and
`tether.contain.trampoline`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field

from tether.contain import argv as config_word
from tether.contain.inplace import TRAMPOLINE, trampoline_argv
from tether.parent.process.pipes import stdio_pipes


@dataclass(frozen=True)
class SpawnSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    rlimits: dict[str, tuple[int, int]] = field(default_factory=dict)
    pdeathsig: bool = True
    cgroup_procs: list[str] = field(default_factory=list)
    """`cgroup.procs` files the trampoline joins before anything else."""
    pass_fds: tuple[int, ...] = ()
    """Descriptors the child inherits beyond its stdio (the zygote's control socket)."""
    plan: dict[str, object] | None = None
    """The isolation plan (`tether.contain.plan.Plan` as JSON) applied before the child's
    first instruction; `None`: process isolation only."""


def trampoline_config(spec: SpawnSpec) -> dict[str, object]:
    """What the trampoline is told for `spec` (its configuration word, `tether.contain.argv`)."""
    return {
        "pdeathsig": int(signal.SIGKILL) if spec.pdeathsig else 0,
        "ppid": os.getpid(),
        "rlimits": spec.rlimits,
        "cgroup_procs": spec.cgroup_procs,
        "plan": spec.plan,
    }


def start(
    spec: SpawnSpec, config: dict[str, object], pass_fds: tuple[int, ...], *, in_place: bool
) -> tuple[subprocess.Popen[bytes], tuple[int, int, int]]:
    """Start `spec`'s command through the trampoline, told `config`, in a session of its own,
    inheriting `pass_fds` beyond its stdio: the process, and our ends of its stdin, stdout and
    stderr. Must run on the thread that stays (PR_SET_PDEATHSIG fires when the spawning
    *thread* exits). Raises `OSError`, leaking no descriptor."""
    argv = trampoline_argv(
        str(TRAMPOLINE), config_word.encode(config), spec.argv, in_place=in_place
    )
    with stdio_pipes() as pipes:
        stdin, stdout, stderr = pipes.child
        popen = subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=spec.env,
            cwd=spec.cwd,
            close_fds=True,
            pass_fds=pass_fds,
            start_new_session=True,
        )
    return popen, pipes.ours


def open_pidfd(pid: int) -> int | None:
    """A pidfd of our child `pid` (readable once it exits; `None` where the kernel has no
    `pidfd_open`, or the pid is gone): what every wait for a process we started parks on."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
