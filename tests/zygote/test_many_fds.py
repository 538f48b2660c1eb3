"""A supervisor that already holds more than 1,024 descriptors runs zygote children like any
other: right results, no exception out of the supervisor, nothing left behind.

(Issue 15, bug 2: `select.select()` on a pidfd numbered 1,024 or more raises; the run came
back `protocol`, leaving the supervisor raised an ExceptionGroup, disposal never finished and
the children's cgroups stayed for the life of the process. tests/protocol/
test_descriptor_discipline.py keeps `select()` out of tether's code.)
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from act_reports import cgroups_named

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import Event, RunStarted
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio

ZYGOTE = ChildConfig(spawner="zygote", dispose=DisposePolicy(shutdown=0.3, eof=0.3, term=0.3))
COMPLETE = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
  "arguments": {"summary": "found it", "paths": ["notes.txt"]}}]}]}"""
FLOOR = 1100
"""Every descriptor the supervisor opens during the test is numbered at least this."""


@pytest.fixture
def fds_past_1024() -> Iterator[None]:
    """Hold every descriptor number below `FLOOR`, so each new one is numbered past it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4 * FLOOR:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}, too low to hold {FLOOR} fds")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4 * FLOOR), hard))
    held: list[int] = []
    try:
        while True:
            fd = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
            held.append(fd)
            if fd >= FLOOR - 1:
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_supervisor_holding_over_1024_fds_runs_zygote_children(
    tmp_path: Path, fds_past_1024: None
) -> None:
    (tmp_path / "notes.txt").write_text("the note\n")
    before = cgroups_named(f"tether-{os.getpid()}-")
    pidfds: list[int] = []
    results: list[RunResult] = []

    def on_event(ev: Event) -> None:
        if isinstance(ev, RunStarted):
            child = sup._live.get(ev.pid)
            if child is not None and child.proc.pidfd is not None:
                pidfds.append(child.proc.pidfd)

    async def one() -> None:
        results.append(
            await sup.run(
                "find it",
                agent="explorer",
                workspace=tmp_path,
                model=ScriptedModel.from_json(COMPLETE),
                on_event=on_event,
            )
        )

    with anyio.fail_after(60):
        async with Supervisor(ZYGOTE) as sup:
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(one)
            zygote = sup.zygote_pid
    assert zygote is not None, "the runs did not go through the zygote"
    assert len(results) == 6
    assert all(r.success for r in results), [r.failure for r in results]
    assert pidfds and min(pidfds) >= 1024, pidfds
    assert cgroups_named(f"tether-{os.getpid()}-") == before
