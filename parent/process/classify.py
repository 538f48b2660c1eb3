"""Exit classification: what the supervisor saw, mapped to one `failure.kind` and a sentence.

Pure: no processes, no I/O. The order of the checks is the priority of the explanations: what
the supervisor itself decided (cancel, a broken protocol, a deadline) explains a death better
than the signal it then used to take the child down.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from tether.parent.process.limits import Limits
from tether.protocol.messages import Failure, FailureKind, Rung

_CRASH_SIGNALS = {
    signal.SIGSEGV,
    signal.SIGBUS,
    signal.SIGILL,
    signal.SIGFPE,
    signal.SIGABRT,
    signal.SIGSYS,
    signal.SIGTRAP,
}


@dataclass
class Observed:
    """Everything the supervisor noticed about one child, filled in as it happens."""

    spawn_error: str | None = None
    cancelled: bool = False
    survivors: list[int] = field(default_factory=list)
    """Pids of the child's tree still alive after the whole ladder and sweep (should be none)."""
    oversize: str | None = None
    protocol_error: str | None = None
    deadline: float | None = None
    """Set to the wall limit (seconds) when it was hit."""
    idle: float | None = None
    """Set to the idle limit (seconds) when it was hit."""
    handshake: float | None = None
    """Set to the handshake timeout when the child did not answer `initialize` in time."""
    agent_error: str | None = None
    """The child answered the run request with a JSON-RPC error."""
    budget: str | None = None
    """Why the parent ended the run for going past its budget (turns or tokens)."""
    net_limit: str | None = None
    """The network limit the run's egress proxy reached (`net_bytes_down=...`), which ended
    the run."""
    exit_code: int | None = None
    signal: int | None = None
    answered: bool = False
    """The child answered the run request (with a result or an error)."""
    truncated: bool = False
    """The child's stdout ended in the middle of a message."""
    rung: Rung = "none"
    stderr_tail: str = ""
    oom_kills: int = 0
    """OOM kills the child's cgroup recorded."""
    pids_max_hits: int = 0
    """Forks the child's cgroup refused at its process limit."""
    cpu_seconds: float = 0.0
    """CPU time the child itself used (user + system, from its rusage when reaped)."""
    limits: Limits = field(default_factory=Limits)
    """The limits the child ran under."""
    lost: str | None = None
    """Why the child's exit status is unknown, when something outside it took it down (the
    zygote that forked it died)."""


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _used_up_cpu(o: Observed) -> bool:
    """Whether a SIGKILL is RLIMIT_CPU's hard limit: only if the child did use that much CPU.
    Anyone else's SIGKILL (an operator, the kernel's OOM killer) is not a CPU limit."""
    seconds = o.limits.cpu_seconds
    return seconds is not None and o.cpu_seconds >= seconds


def classify(o: Observed) -> tuple[FailureKind, str] | None:
    """The failure kind and its message, or `None` when nothing went wrong."""
    shown = o.limits.shown()
    if o.spawn_error is not None:
        return "spawn_failed", o.spawn_error
    if o.cancelled:
        return "cancelled", "the run was cancelled by the parent"
    if o.lost is not None and not o.answered:
        return "killed", o.lost
    # Without a memory cgroup the limit is RLIMIT_DATA: a Python child's allocation fails and
    # it dies of MemoryError rather than being killed.
    rlimit_oom = "memory" in shown and not o.answered and "MemoryError" in o.stderr_tail
    if o.oom_kills > 0 or rlimit_oom:
        return "oom", f"the child ran out of memory (limit {shown.get('memory', '?')})"
    if o.signal == signal.SIGXCPU or (
        o.signal == signal.SIGKILL and o.rung not in ("sigterm", "sigkill") and _used_up_cpu(o)
    ):
        return "cpu_limit", f"the child used up its CPU time (limit {shown.get('cpu', '?')})"
    # Shells report a child's death by signal as 128 + its number; Python ignores SIGXFSZ and
    # fails with EFBIG ("File too large") instead.
    efbig = (
        "file_size" in shown
        and not o.answered
        and ("File too large" in o.stderr_tail or o.exit_code == 128 + signal.SIGXFSZ)
    )
    if o.signal == signal.SIGXFSZ or efbig:
        return "fsize_limit", (
            f"the child wrote past its file size limit ({shown.get('file_size', '?')})"
        )
    # Without a pids cgroup the limit is RLIMIT_NPROC: fork fails with EAGAIN.
    eagain = "processes" in shown and "Resource temporarily unavailable" in o.stderr_tail
    if (o.pids_max_hits > 0 or eagain) and not o.answered:
        return "tasks_limit", (
            f"the child hit its process limit ({shown.get('processes', '?')}) and failed"
        )
    if o.oversize is not None:
        return "oversize", o.oversize
    if o.protocol_error is not None:
        return "protocol", o.protocol_error
    if o.budget is not None:
        return "budget_exhausted", o.budget
    if o.net_limit is not None:
        return "net_limit", (
            f"the run reached its network limit ({o.net_limit}): its egress proxy cut every "
            "connection"
        )
    if o.deadline is not None:
        return "timeout", f"the run passed its wall-clock limit of {o.deadline:g}s"
    if o.idle is not None:
        return "unresponsive", f"the child sent nothing for {o.idle:g}s (idle limit)"
    if o.handshake is not None:
        return "unresponsive", f"the child did not answer initialize within {o.handshake:g}s"
    if o.agent_error is not None:
        return "agent_error", o.agent_error
    ours = o.rung in ("sigterm", "sigkill")
    if o.signal is not None and not o.answered and not ours:
        name = signal_name(o.signal)
        if o.signal in _CRASH_SIGNALS:
            return "crashed", f"the child crashed ({name})"
        return "killed", f"the child was killed by {name}"
    if o.exit_code not in (None, 0) and not o.answered:
        return "exit_nonzero", f"the child exited with status {o.exit_code} before answering"
    if o.truncated and not o.answered:
        return "protocol", "the child's output ended in the middle of a message"
    if not o.answered:
        how = (
            f"exited with status {o.exit_code}"
            if o.exit_code is not None
            else f"died ({signal_name(o.signal)})"
            if o.signal is not None
            else "closed its output"
        )
        return "protocol", f"the child {how} without answering the run"
    return None


def failure_of(o: Observed) -> Failure | None:
    got = classify(o)
    if got is None:
        return None
    kind, _ = got
    limit = None
    by_kind = {
        "oom": "memory",
        "cpu_limit": "cpu",
        "fsize_limit": "file_size",
        "tasks_limit": "processes",
    }
    shown = o.limits.shown()
    if kind in by_kind and by_kind[kind] in shown:
        limit = f"{by_kind[kind]}={shown[by_kind[kind]]}"
    elif kind == "net_limit":
        limit = o.net_limit
    elif kind == "timeout" and o.deadline is not None:
        limit = f"wall={o.deadline:g}s"
    elif kind == "unresponsive" and o.idle is not None:
        limit = f"idle={o.idle:g}s"
    elif kind == "unresponsive" and o.handshake is not None:
        limit = f"handshake={o.handshake:g}s"
    return Failure(
        kind=kind,
        exit_code=o.exit_code,
        signal=signal_name(o.signal) if o.signal is not None else None,
        rung=o.rung,
        limit=limit,
        stderr_tail=o.stderr_tail,
    )


_HINTS = ("for more information", "--help", "usage:")
"""What a command's last stderr line says when it only points at its own help."""


def explaining_line(stderr: str) -> str:
    """The line of a failed command's stderr that says why: the last one that is not only a
    pointer to its help ("Run 'docker run --help' for more information")."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if not any(hint in line.lower() for hint in _HINTS):
            return line
    return lines[-1] if lines else ""
