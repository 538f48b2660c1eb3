"""The keeper: outlives its supervisor just long enough to take down what the supervisor started.

Run as `python -I -S _keeper.py NEEDLE`, where NEEDLE is `TETHER_TREE=<marker prefix>`, with
stdin the read end of a pipe whose only write end the supervisor holds (close-on-exec, so no
child inherits it). Like the trampoline it imports only the standard library. It reads lines:

    +PID [PROCS...]  a child was spawned; PID leads its own session and process group, and
                     PROCS are the `cgroup.procs` files of its cgroups, when it has any
    -PID    that child has been reaped
    bye     the supervisor is closing normally: exit without killing anything

End of input without `bye` means the supervisor died without running any more code (SIGKILL,
a crash, the OOM killer). PR_SET_PDEATHSIG has killed its children by then, but not their
descendants: the death signal is cleared in every fork, so a grandchild is reparented and runs
on. The keeper SIGKILLs every process whose environment carries a tree marker minted by that
supervisor (every child's descendants inherit it) and every process in a registered child's
session or process group (which also catches descendants that scrubbed their environment) or
cgroup (which catches everything, a daemon that left the session and scrubbed its environment
included; a v2 cgroup is killed whole through its `cgroup.kill`), and repeats the sweep until
one finds nothing, for at most `SWEEP_SECONDS`; then it removes the emptied cgroups (retrying
those still busy for at most `REMOVE_SECONDS`).
"""

import ctypes
import errno
import os
import signal
import sys
import time

SWEEP_SECONDS = 5.0
REMOVE_SECONDS = 2.0
PR_SET_DUMPABLE = 4


def _undumpable() -> None:
    """Non-dumpable: no process of the same user can ptrace the keeper or open its /proc
    files, so none can reopen its end of the supervisor's pipe (`/proc/PID/fd/0`, opened for
    writing) and write the farewell that disarms it."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


# `running` and `environ` are also the supervisor's (`tree.py`): the keeper imports nothing but
# the standard library, so they live here.


def running(pid: int) -> bool:
    """Whether any thread of process `pid` still runs. A thread-group leader that /proc shows
    as a zombie is not the end of its process: a main thread that called exit(2) alone (not
    exit_group) leaves the other threads running behind it, and a tree sweep that took the
    leader's state for the process's would let them live on."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X"):
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1  # the leader's other threads
    except OSError:
        return False


def environ(pid: int) -> bytes:
    """Process `pid`'s environment block as /proc shows it; raises `OSError`. A leader that
    has exited alone has let go of its memory, so its own block cannot be read (ESRCH) or
    reads empty: the block is then read through one of the threads still running."""
    try:
        env = _read_all(f"/proc/{pid}/environ")
    except ProcessLookupError:
        env = b""
    if env:
        return env
    try:
        threads = [t for t in os.listdir(f"/proc/{pid}/task") if t != str(pid)]
    except OSError:
        return env
    for tid in threads:
        try:
            return _read_all(f"/proc/{pid}/task/{tid}/environ")
        except OSError:
            continue
    return env


def _read_all(path: str) -> bytes:
    """A /proc file's whole content, read with bare descriptors: a sweep reads every visible
    session's environment, and a buffered file object cost a third of each read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _members(procs_files: list[str]) -> set[int]:
    found: set[int] = set()
    for path in procs_files:
        try:
            with open(path, "rb") as f:
                found.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def _targets(needle: bytes, leaders: set[int], cgroups: list[str]) -> list[int]:
    me = os.getpid()
    members = _members(cgroups)
    found = [pid for pid in members if pid != me and running(pid)]
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me or pid in members:
            continue
        try:
            sid = os.getsid(pid)
            if sid == 0:
                continue  # a kernel thread or a session not ours (see tree.OUTSIDE_EVERY_SESSION)
            ours = sid in leaders or os.getpgid(pid) in leaders
        except OSError:
            continue
        if not ours:
            try:
                ours = needle in b"\0" + environ(pid)
            except OSError:
                continue
        if ours and running(pid):
            found.append(pid)
    return found


def _cgroup_kill(procs_files: list[str]) -> None:
    """Kill each v2 cgroup whole (`cgroup.kill` beside its `cgroup.procs`; v1 has none): the
    kernel also gets whatever its members fork meanwhile."""
    for path in procs_files:
        try:
            with open(os.path.join(os.path.dirname(path), "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            continue


def _remove_cgroups(procs_files: list[str], seconds: float = REMOVE_SECONDS) -> None:
    """Remove the emptied cgroup directories, retrying those the kernel still calls busy: a
    killed process can leave its cgroup a little after it looks gone (a thread-group leader is
    a zombie while its other threads are still exiting). Best effort within `seconds`: the next
    supervisor to start also sweeps what is left (`cgroups.sweep_stale`)."""
    deadline = time.monotonic() + seconds
    left = [os.path.dirname(path) for path in procs_files]
    while True:
        busy = []
        for directory in left:
            try:
                os.rmdir(directory)
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    busy.append(directory)  # anything else will not change by waiting
        if not busy or time.monotonic() >= deadline:
            return
        left = busy
        time.sleep(0.01)


def sweep(
    needle: bytes, leaders: set[int], cgroups: list[str], seconds: float = SWEEP_SECONDS
) -> None:
    deadline = time.monotonic() + seconds
    delay = 0.005
    while True:
        _cgroup_kill(cgroups)
        found = _targets(needle, leaders, cgroups)
        if not found or time.monotonic() >= deadline:
            _remove_cgroups(cgroups)
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def main(argv: list[str]) -> None:
    _undumpable()
    needle = b"\0" + argv[1].encode()
    leaders: set[int] = set()
    cgroups: dict[int, list[str]] = {}
    lines = sys.stdin.buffer
    while True:
        line = lines.readline()
        if not line:
            break
        word = line.strip()
        if word == b"bye":
            # At once: the supervisor's close waits for this exit, and the interpreter's own
            # teardown (nothing to flush: no output, no file written) took ≈ 3 ms of it.
            os._exit(0)
        try:
            if word.startswith(b"+"):
                pid, *procs = word[1:].split()
                leaders.add(int(pid))
                cgroups[int(pid)] = [p.decode() for p in procs]
            elif word.startswith(b"-"):
                leaders.discard(int(word[1:]))
                cgroups.pop(int(word[1:]), None)
        except ValueError:
            continue
    sweep(needle, leaders, [path for paths in cgroups.values() for path in paths])


if __name__ == "__main__":
    main(sys.argv)
