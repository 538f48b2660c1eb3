"""Which commands the trampoline becomes in place instead of exec'ing (see `trampoline.py`),
and the trampoline's own argv for a command: the parent and the trampoline decide alike.

A trampoline that will become the child in place starts with site (`-I`, the child's own
flags), so site's processing of site-packages (`.pth` lines, `sitecustomize`) runs *before* the
contained sequence. That is only allowed when the child cannot have written any of it: a
sandboxed child whose granted write paths hold a directory of the import path (a workspace
that contains the virtualenv, say) could plant a `.pth` that the next child's trampoline would
run outside the sandbox. Such a child is exec'd, with site processed inside its sandbox.

An unsandboxed child run in place joins its cgroups on a thread of its own while it imports
its runtime (`join_meanwhile`), and waits for the join before it loads an agent or reads the
wire (`joined`, called by `tether.child.entry.run`): a join waits for the kernel's migration
lock, on a stock host an RCU grace period (7-30 ms of a cold spawn), and what runs meanwhile
is only tether's runtime being imported from an import path the child cannot write. A runtime
that fails before it serves ends the process only once the join is over (`settled`). What those
imports allocate is charged to the supervisor's cgroup, as the pages a zygote's child shares
with its zygote are; everything the child does once it serves is charged to its own. A
sandboxed child joins before its sandbox (Landlock and seccomp are per thread, so the process
must have one), and an exec'd one before its exec.

Only the standard library's `os`, `sys`, `_thread`, `atexit` and `time`: the trampoline imports
this before anything else.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

_PENDING: list[tuple[Any, list[BaseException | None], str, int]] = []
"""The join under way (`join_meanwhile`): its lock, its outcome, the command's name, and how
many threads ran beside the main one before its own."""

OWN_CHILD = ("-I", "-m", "tether.child")
TRAMPOLINE = os.path.join(os.path.dirname(__file__), "trampoline.py")
"""The trampoline's path, not resolved: an editable install's link tree is kept (the trampoline
finds its sibling modules next to it). Run with `python -I -S`, or `-I` for tether's own child."""
"""After `sys.executable`: tether's own child, the command run in place."""


def runs_in_place(command: Sequence[str]) -> bool:
    """Whether the trampoline becomes `command` in place: tether's own child, run by this
    interpreter."""
    return list(command[:1]) == [sys.executable] and tuple(command[1:4]) == OWN_CHILD


def join_meanwhile(procs_files: Sequence[str], name: str) -> None:
    """Start writing this process's pid into `procs_files` on a thread of its own; `joined()`
    waits for it. `name`: the command, for the failure line."""
    if not procs_files:
        return
    import _thread

    from tether.contain.sequence import join_cgroups

    done = _thread.allocate_lock()
    done.acquire()
    outcome: list[BaseException | None] = []

    def join() -> None:
        try:
            join_cgroups(procs_files)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            done.release()

    _PENDING.append((done, outcome, name, _thread._count()))
    _thread.start_new_thread(join, ())
    import atexit

    atexit.register(settled)  # `joined` takes it back: a runtime that serves ends by os._exit


def joined() -> None:
    """Return once this process is in its cgroups (at once when no join is under way). A join
    that failed ends the process as the trampoline ends one it could not contain: status 127
    and the line the supervisor reports as the spawn's failure."""
    if not _PENDING:
        return
    done, outcome, name, _ = _PENDING.pop()
    import atexit

    atexit.unregister(settled)  # as a child exec'd has nothing registered
    done.acquire()
    failure = outcome[0] if outcome else None
    if failure is not None:
        from tether.contain.sequence import EXEC_FAILED

        why = failure.strerror if isinstance(failure, OSError) else None
        os.write(2, f"{EXEC_FAILED} {name}: cannot join its cgroup: {why or failure}\n".encode())
        os._exit(127)


def settled() -> None:
    """Return once a join under way is over and its thread gone, whatever came of it: run at
    exit (`atexit`, before the interpreter finalizes), for a process that ends before it
    served (its runtime failed to start, after the traceback is written). A thread that wakes
    from its write into a finalizing interpreter is ended there with `pthread_exit`, for which
    glibc loads libgcc_s, aborting the whole process when it cannot: no file descriptor or
    memory left, the very failures that end a runtime this early (SIGABRT, "libgcc_s.so.1 must
    be installed for pthread_exit to work", instead of the exit and its reason)."""
    if not _PENDING:
        return
    import _thread
    import time

    done, _, _, others = _PENDING.pop()
    done.acquire()
    # Released as the thread's last step in Python; gone once the interpreter stops counting
    # it. Bounded: a thread the runtime started meanwhile counts too.
    deadline = time.monotonic() + 1.0
    while _thread._count() > others and time.monotonic() < deadline:
        time.sleep(0.001)


def writable_by_child(plan: Mapping[str, Any] | None) -> list[str]:
    """The host paths a sandboxed child may write (`Plan` as JSON); `[]` outside a sandbox,
    where nothing is kept from the supervisor's own user anyway. With private mounts the
    plan's other write grants (/tmp, /var/tmp, /dev/shm, the home in them) are the child's own
    tmpfs, not the host's directories of those names: only the workspace is the host's."""
    if not plan or plan.get("level") != "sandbox":
        return []
    paths = [] if plan.get("private_mounts") else [*(plan.get("writes") or ()), plan.get("home")]
    if not plan.get("workspace_read_only"):
        paths.append(plan.get("workspace"))
    return [str(p) for p in paths if p]


def import_path_writable(plan: Mapping[str, Any] | None, import_path: Sequence[str]) -> bool:
    """Whether a directory of `import_path` (each as given and resolved, as the caller keeps
    it) is, or lies inside, a path `plan` lets the child write, and not inside one it mounts
    read-only again (`protect`); the plan's paths are compared as given and resolved."""
    if not plan:
        return False
    granted = _forms(writable_by_child(plan))
    kept = _forms(plan.get("protect") or ()) if plan.get("private_mounts") else set()
    return any(
        _within(path, root) and not any(_within(path, k) for k in kept)
        for path in import_path
        for root in granted
    )


def _forms(paths: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for p in paths:
        if p and os.path.isabs(p):
            out.update((os.path.normpath(p), os.path.realpath(p)))
    return out


def _within(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def trampoline_argv(
    trampoline: str, config: str, command: Sequence[str], *, in_place: bool
) -> list[str]:
    """`python -I -S trampoline.py CONFIG -- COMMAND`, or `python -I ...` when the trampoline
    is to become `command` in place (`runs_in_place` and the import path safe, decided by the
    caller): the interpreter then starts with the flags the command names (`-I`, site)."""
    flags = ["-I"] if in_place and runs_in_place(command) else ["-I", "-S"]
    return [sys.executable, *flags, trampoline, config, "--", *command]
