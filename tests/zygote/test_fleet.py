"""256 live children at once through one supervisor's zygote: every one becomes ready and runs,
and nothing of any of them is left afterwards. (The figures — time to ready, `ping` p99, USS,
dispose — are measured by `benchmarks/fleet.py` in the bench, not here.)"""

from __future__ import annotations

from pathlib import Path

import anyio
import psutil
import pytest

from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import Event, RunStarted
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolCall,
    Usage,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]

CHILDREN = 256
ZYGOTE = ChildConfig(spawner="zygote", dispose=DisposePolicy(shutdown=5.0, eof=1.0, term=1.0))


class HeldModel:
    """Answers `complete` only once every child has asked: all of them live at once."""

    def __init__(self) -> None:
        self.release = anyio.Event()

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        await self.release.wait()
        call = ToolCall(id="1", name="complete", arguments={"summary": "ok", "paths": []})
        message = ChatMessage(role="assistant", content="done", tool_calls=[call])
        return ModelCompleteResult(message=message, usage=Usage(1, 1))


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


async def test_256_children_through_the_zygote_are_all_live_at_once_and_leave_nothing(
    tmp_path: Path,
) -> None:
    model = HeldModel()
    pids: set[int] = set()
    results: list[RunResult] = []
    all_started = anyio.Event()

    def on_event(ev: Event) -> None:
        if isinstance(ev, RunStarted):
            pids.add(ev.pid)
            if len(pids) == CHILDREN:
                all_started.set()

    async def one() -> None:
        results.append(await sup.run("x", workspace=tmp_path, model=model, on_event=on_event))

    with anyio.fail_after(100):
        async with Supervisor(ZYGOTE) as sup, anyio.create_task_group() as tg:
            for _ in range(CHILDREN):
                tg.start_soon(one)
            await all_started.wait()
            assert all(_alive(pid) for pid in pids)
            zygote = sup.zygote_pid
            model.release.set()
    assert zygote is not None and not _alive(zygote)
    assert len(results) == CHILDREN
    assert all(r.success for r in results), {r.message for r in results if not r.success}
    assert not [pid for pid in pids if _alive(pid)]
