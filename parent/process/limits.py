"""Limits and timeouts of one child, parsed from human units before anything is spawned."""

from __future__ import annotations

import re
import resource
from dataclasses import dataclass

MAX_SECONDS = 10 * 365 * 86400
"""Durations past ten years are a typo, not a limit."""
MAX_BYTES = (1 << 63) - 1
MAX_PROCESSES = 4_194_304
"""The kernel's largest pid_max."""


def max_open_files() -> int:
    """The most descriptors a process may be allowed here (`fs.nr_open`)."""
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20


_inherited_open_files: int | None = None


def raise_open_files_limit() -> None:
    """Raise this process's RLIMIT_NOFILE soft limit to its hard limit, once per process.

    Each live child costs the supervisor several descriptors (its three pipe ends, its pidfd,
    cgroup files while it starts), so the common soft limit of 1,024 runs out near 200
    children while the hard limit (often 4,096 up to 1,048,576) allows far more. Called when a
    `Supervisor` is entered; the soft limit found then is what children inherit again
    (`inherited_open_files()`), so no child sees a change — a program that still uses
    `select()` breaks on descriptors past 1,023."""
    global _inherited_open_files
    if _inherited_open_files is not None:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    _inherited_open_files = soft
    # The kernel refuses a soft limit past fs.nr_open; the hard limit is left as it is.
    wanted = min(hard, max_open_files()) if hard != resource.RLIM_INFINITY else max_open_files()
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError):
            pass  # a sandbox or a policy may forbid it: keep the limit we were given


def inherited_open_files() -> int | None:
    """The RLIMIT_NOFILE soft limit this process had before `raise_open_files_limit()` raised
    it, for children to start with; `None` when it was not raised."""
    if _inherited_open_files is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _inherited_open_files if soft != _inherited_open_files else None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|h|m|s)\s*", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION_EXAMPLES = "'30s', '1m30s', '1h', '500ms' or a number of seconds"


def _compound_seconds(text: str) -> float | None:
    """Seconds from `1h2m3s`, `1m30s`, `2m`, `1.5s`, `500ms` (units largest first, each at most
    once) or a bare number of seconds; `None` when `text` is none of these."""
    bare = _BARE_NUMBER.match(text)
    if bare:
        return float(bare.group(1))
    pos, seconds, order = len(text) - len(text.lstrip()), 0.0, list(_DURATION_UNITS)
    last = -1
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            return None
        rank = order.index(m.group(2).lower())
        if rank <= last:
            return None  # `30s1m`, `1m1m`: out of order or repeated
        last = rank
        seconds += float(m.group(1)) * _DURATION_UNITS[order[rank]]
        pos = m.end()
    return seconds if last >= 0 else None


def parse_duration(value: float | int | str | None, what: str) -> float | None:
    """Seconds from `30`, `"30s"`, `"1m30s"`, `"500ms"`, `"2h"`; `None` stays `None` (no
    limit). `what` names the value in errors (a field, or the command-line flag)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a duration like {_DURATION_EXAMPLES}, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        got = _compound_seconds(value)
        if got is None:
            raise ValueError(
                f"{what}: expected a duration like {_DURATION_EXAMPLES}, got {value!r}"
            )
        seconds = got
    if not seconds > 0:
        raise ValueError(f"{what}: must be positive, got {value!r}")
    return seconds


def parse_size(value: int | str | None, what: str) -> int | None:
    """Bytes from `1048576` (an int is bytes), `"512M"`, `"2GiB"`, `"64k"`, `"100B"`; `None`
    stays `None`. A string needs its unit: `"512"` is refused rather than read as 512 bytes
    (which a memory limit would turn into an immediate `oom`). `what` names the value in
    errors (a field, or the command-line flag)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a size like '512M', got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.match(value)
        if not m:
            raise ValueError(f"{what}: expected a size like '512M' or '2G', got {value!r}")
        if not m.group(2):
            raise ValueError(
                f"{what}: {value!r} has no unit; write {m.group(1)}M for mebibytes (or K, G, "
                f"T), or {m.group(1)}B if you really mean bytes"
            )
        unit = m.group(2).lower().rstrip("b").rstrip("i")
        n = int(float(m.group(1)) * _SIZE_UNITS[unit])
    if n <= 0:
        raise ValueError(f"{what}: must be positive, got {value!r}")
    return n


@dataclass(frozen=True)
class Limits:
    """What one child may use. Accepts human units (`"512M"`, `"30s"`); `None` means no limit.

    Construct with `Limits.parse(...)` (or `Limits(...)`, which validates too): a bad value is
    refused with a clear `ValueError` before anything is spawned.
    """

    wall: float | str | None = None
    """Seconds for the whole run, spawn to result (`timeout`)."""
    idle: float | str | None = None
    """Seconds of silence from the child while a run is going (`unresponsive`); time the parent
    spends answering the child's own requests (a model turn) does not count. tether's own child
    sends a heartbeat every `HEARTBEAT_SECONDS` (2 s) while a tool call is pending, so keep this
    well above that (at least twice it; the supervisor warns below), or a tool call that takes
    longer is cut as `unresponsive`."""
    memory: int | str | None = None
    """Memory (`oom`): an int is bytes; a string needs its unit (`"512M"`, `"2G"`, `"100B"`)."""
    cpu: float | str | None = None
    """CPU seconds (`cpu_limit`)."""
    processes: int | None = None
    """Processes/threads at once (`tasks_limit`)."""
    open_files: int | None = None
    file_size: int | str | None = None
    """Largest file the child may write (`fsize_limit`): an int is bytes; a string needs its
    unit (`"100M"`)."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "wall", parse_duration(self.wall, "wall"))
        set_(self, "idle", parse_duration(self.idle, "idle"))
        set_(self, "cpu", parse_duration(self.cpu, "cpu"))
        set_(self, "memory", parse_size(self.memory, "memory"))
        set_(self, "file_size", parse_size(self.file_size, "file_size"))
        for name in ("processes", "open_files"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise ValueError(f"{name}: expected a positive whole number, got {value!r}")
        # Out of what the kernel can apply is the caller's mistake, caught before any spawn.
        for name, most in (
            ("wall", MAX_SECONDS),
            ("idle", MAX_SECONDS),
            ("cpu", MAX_SECONDS),
            ("memory", MAX_BYTES),
            ("file_size", MAX_BYTES),
            ("processes", MAX_PROCESSES),
            ("open_files", None),
        ):
            value = getattr(self, name)
            if value is not None and most is None:
                most = max_open_files()  # a read of /proc: only when a limit is set
            if value is not None and value > most:
                raise ValueError(f"{name}: {value!r} is more than this host can apply ({most})")

    @property
    def wall_seconds(self) -> float | None:
        return self.wall  # type: ignore[return-value]

    @property
    def idle_seconds(self) -> float | None:
        return self.idle  # type: ignore[return-value]

    @property
    def memory_bytes(self) -> int | None:
        return self.memory  # type: ignore[return-value]

    @property
    def cpu_seconds(self) -> float | None:
        return self.cpu  # type: ignore[return-value]

    def shown(self) -> dict[str, str]:
        """The limits in force, as a person would write them, for failure reports."""
        out: dict[str, str] = {}
        if self.memory is not None:
            out["memory"] = _human_bytes(int(self.memory))
        if self.cpu is not None:
            out["cpu"] = f"{float(self.cpu):g}s"
        if self.processes is not None:
            out["processes"] = str(self.processes)
        if self.file_size is not None:
            out["file_size"] = _human_bytes(int(self.file_size))
        if self.open_files is not None:
            out["open_files"] = str(self.open_files)
        return out

    def rlimits(
        self, *, memory_in_cgroup: bool = False, pids_in_cgroup: bool = False
    ) -> dict[str, tuple[int, int]]:
        """The rlimits the trampoline applies before the child's first line runs. Memory and
        processes are left to the cgroup when it enforces them (it sees the whole tree; an
        rlimit is per process, and RLIMIT_NPROC is per user)."""
        out: dict[str, tuple[int, int]] = {}
        if self.memory is not None and not memory_in_cgroup:
            # RLIMIT_DATA, not RLIMIT_AS: address space reservations (thread stacks, mmap'd
            # files, allocator arenas) would make AS fail long before real use does.
            out["RLIMIT_DATA"] = (int(self.memory), int(self.memory))
        if self.cpu is not None:
            soft = max(1, int(float(self.cpu) + 0.999))
            out["RLIMIT_CPU"] = (soft, soft + 1)
        if self.open_files is not None:
            out["RLIMIT_NOFILE"] = (self.open_files, self.open_files)
        if self.file_size is not None:
            out["RLIMIT_FSIZE"] = (int(self.file_size), int(self.file_size))
        if self.processes is not None and not pids_in_cgroup:
            out["RLIMIT_NPROC"] = (self.processes, self.processes)
        return out


def _human_bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


@dataclass(frozen=True)
class DisposePolicy:
    """Grace, in seconds, given to each rung of the dispose ladder before the next one.

    The defaults, and why (docs/protocol.md, "The dispose ladder"): `shutdown` 2 s is for runs to
    unwind and answer `aborted` (they are cancelled, which takes milliseconds unless a tool is
    stuck); `eof` 1 s is the lifeline for a child that was never asked `shutdown` (not ready,
    cut off, or a foreign agent) — tether's child leaves on EOF at once, and after an
    unanswered `shutdown` it is not waited at all (EOF is queued behind the request); `term`
    1 s because SIGTERM is the child's second or third chance to leave on its own (tether's
    child keeps SIGTERM's default action and dies at once; a process that handles it only has
    to flush and exit); `kill` 2 s for the kernel to take a large tree down. A child that
    ignores everything is SIGKILLed `stubborn_seconds()` after dispose starts: 3 s when it
    was asked `shutdown`, 2 s when not.
    """

    shutdown: float = 2.0
    """`shutdown` request answered and the child exited on `exit`."""
    eof: float = 1.0
    """After `exit` and closing stdin, the child's exit on EOF (counted from when stdin
    closed; not waited after a `shutdown` that went unanswered)."""
    term: float = 1.0
    """After SIGTERM (+SIGCONT) to the tree."""
    kill: float = 2.0
    """After SIGKILL, for the kernel to take the tree down."""

    def __post_init__(self) -> None:
        for name in ("shutdown", "eof", "term", "kill"):
            if getattr(self, name) < 0:
                raise ValueError(f"dispose grace {name!r} must not be negative")

    def stubborn_seconds(self, *, asked_shutdown: bool) -> float:
        """How long after dispose starts a child that ignores every rung is SIGKILLed: the
        shutdown rung's grace then SIGTERM's when it was asked `shutdown` (its EOF wait was
        spent there), else the EOF lifeline's then SIGTERM's."""
        return (self.shutdown if asked_shutdown else self.eof) + self.term
