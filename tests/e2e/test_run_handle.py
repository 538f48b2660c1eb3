"""A live run can be looked at through its public handle: `pid`, `state`, `ping()`; and every
result names the launcher, the child's pid and how long the run took."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import psutil
import pytest

from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event, RunStarted
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).with_name("failing_agents.py")
SILENT = Path(__file__).parents[1] / "children" / "silent.py"
FAST = ChildConfig(dispose=DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=1.0))


async def test_a_live_run_has_a_pid_a_state_and_answers_ping(tmp_path: Path) -> None:
    waiting = anyio.Event()
    started: list[RunStarted] = []

    def on_event(ev: Event) -> None:
        if isinstance(ev, RunStarted):
            started.append(ev)
        if isinstance(ev, ChildEvent) and ev.kind == "report":
            waiting.set()

    async with Supervisor(FAST) as sup:
        handle = await sup.start(
            "go", agent=f"{AGENTS}:waits", workspace=tmp_path, on_event=on_event
        )
        assert handle.state == "starting"
        with anyio.fail_after(20):
            await waiting.wait()
        assert handle.state == "running"
        assert handle.pid is not None and psutil.Process(handle.pid).is_running()
        with anyio.fail_after(10):
            rtt = await handle.ping()
        assert rtt is not None and 0 < rtt < 10
        result = await handle.cancel()
        assert handle.state == "done"
        assert await handle.ping() is None
    assert result.failure is not None and result.failure.kind == "cancelled"
    assert result.pid == handle.pid == started[0].pid
    assert result.launcher == started[0].launcher == "local"
    assert result.duration_seconds is not None and result.duration_seconds > 0


async def test_pinging_a_child_that_does_not_answer_is_bounded_by_the_caller(
    tmp_path: Path,
) -> None:
    async with Supervisor(FAST) as sup:
        handle = await sup.start(
            "go", workspace=tmp_path, command=[sys.executable, "-I", str(SILENT)]
        )
        with anyio.fail_after(20):
            while handle.state != "running":
                await anyio.sleep(0.01)
        with anyio.move_on_after(0.5) as waited:
            await handle.ping()
        assert waited.cancelled_caught  # it takes runs but answers nothing
        handle.abort()
        result = await handle.result()
    assert result.failure is not None and result.failure.kind == "cancelled"


async def test_a_run_that_never_started_a_process_has_no_pid(tmp_path: Path) -> None:
    async with Supervisor(FAST) as sup:
        result = await sup.run("go", workspace=tmp_path, command=["no-such-command-xyz"])
    assert result.failure is not None and result.failure.kind == "spawn_failed"
    assert result.pid is None and result.launcher == "local"
    assert result.duration_seconds is not None
