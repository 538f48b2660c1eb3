"""An agent the zygote tests host through `--agent FILE:act` (loaded by path: `-I` ignores
PYTHONPATH). The prompt says what the child does. Not collected by pytest: no `test_` prefix.

    finish        answer at once
    exit N        exit with status N before answering
    segv          die of SIGSEGV
    hold          report its pid and environment, then wait (for cancel or teardown)
    stubborn      report, ignore SIGTERM and block the event loop (deaf to EOF and cancel)
    grandchild    start `sleep 60` in a session of its own, report both pids, then wait
    orphans N     make N processes with CLONE_PARENT (children of the zygote) that exit at
                  once, report their pids, then answer
    strays N      as `orphans N`, then wait instead of answering
"""

from __future__ import annotations

import builtins
import ctypes
import gc
import os
import signal
import subprocess
import sys
import time

import anyio

from tether.child.agent import AgentContext, AgentOutcome, Finished
from tether.protocol.messages import AgentRunParams


class Act:
    def __init__(self, params: AgentRunParams) -> None:
        self.word, _, self.arg = params.prompt.partition(" ")

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        me = {"pid": os.getpid(), "environ": dict(os.environ), "interpreter": interpreter()}
        if self.word == "finish":
            return Finished(summary=f"pid {os.getpid()}", message="finished")
        if self.word == "exit":
            os._exit(int(self.arg))
        if self.word == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.word == "stubborn":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            await ctx.emit("report", me)
            time.sleep(60)  # noqa: ASYNC251 - deaf on purpose
        if self.word in ("orphans", "strays"):
            me["orphans"] = [_clone_parent() for _ in range(int(self.arg))]
            await ctx.emit("report", me)
            if self.word == "orphans":
                return Finished(summary="orphans", message="made")
            await anyio.sleep_forever()
        if self.word == "grandchild":
            sleeper = subprocess.Popen(  # noqa: ASYNC220 - instant
                ["sleep", "60"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
            me["grandchild"] = sleeper.pid
        await ctx.emit("report", me)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def _clone_parent() -> int:
    """clone(CLONE_PARENT | SIGCHLD): a process that is our parent's child; it exits at once."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    nr = 56 if os.uname().machine == "x86_64" else 220
    pid = int(libc.syscall(ctypes.c_long(nr), ctypes.c_long(0x00008000 | 17), 0, 0, 0, 0))
    if pid == 0:
        os._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone(CLONE_PARENT)")
    return pid


def _fd_kind(fd: str) -> str:
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "gone"  # the directory's own fd, closed by the time it is read
    return target.split(":")[0] if ":" in target else target


def interpreter() -> dict[str, object]:
    """What a child's code can see of how its interpreter started."""
    return {
        "path": sys.path,
        "argv": sys.argv,
        "flags": {
            f: getattr(sys.flags, f) for f in ("isolated", "no_site", "no_user_site", "safe_path")
        },
        "site": "site" in sys.modules,
        "exit_builtin": hasattr(builtins, "exit"),
        "gc_enabled": gc.isenabled(),
        "gc_frozen": gc.get_freeze_count() > 0,
        "fds": sorted(_fd_kind(fd) for fd in os.listdir("/proc/self/fd")),
    }


def act(params: AgentRunParams) -> Act:
    return Act(params)
