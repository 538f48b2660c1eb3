"""An agent the zygote tests host through `--agent FILE:act` (loaded by path: `-I` ignores
PYTHONPATH). The prompt says what the child does. Not collected by pytest: no `test_` prefix.

    finish        answer at once
    exit N        exit with status N before answering
    segv          die of SIGSEGV
    hold          report its pid and environment, then wait (for cancel or teardown)
    stubborn      report, ignore SIGTERM and block the event loop (deaf to EOF and cancel)
    grandchild    start `sleep 60` in a session of its own, report both pids, then wait
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import anyio

from tether.child.agent import AgentContext, AgentOutcome, Finished
from tether.protocol.messages import AgentRunParams


class Act:
    def __init__(self, params: AgentRunParams) -> None:
        self.word, _, self.arg = params.prompt.partition(" ")

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        me = {"pid": os.getpid(), "environ": dict(os.environ)}
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


def act(params: AgentRunParams) -> Act:
    return Act(params)
