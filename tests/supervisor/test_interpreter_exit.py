"""At interpreter exit, whatever a supervisor still has running is SIGKILLed with its tree."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tether.parent.run.core import _dispose_at_exit
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import Supervisor

CHILDREN = Path(__file__).resolve().parent.parent / "children"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.anyio
async def test_the_exit_hook_kills_every_live_child_and_its_grandchildren(tmp_path: Path) -> None:
    reported: list[dict[str, object]] = []

    def keep(ev: Event) -> None:
        if isinstance(ev, ChildEvent) and ev.kind == "text":
            reported.append(ev.data)

    async with Supervisor() as sup:
        handle = await sup.start(
            "go",
            workspace=tmp_path,
            command=[sys.executable, "-I", str(CHILDREN / "spawner.py")],
            on_event=keep,
        )
        with anyio.fail_after(10):
            while not reported:
                await anyio.sleep(0.01)
        pids = [reported[0]["child"], *reported[0]["grandchildren"]]  # type: ignore[list-item]
        # What the interpreter runs at exit, while the run is still going.
        _dispose_at_exit()
        deadline = time.monotonic() + 2
        while not all(_gone(int(p)) for p in pids) and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        assert all(_gone(int(p)) for p in pids), "the exit hook left part of the tree running"
        result = await handle.result()
    assert not result.success
    assert result.failure is not None and result.failure.signal == "SIGKILL"
