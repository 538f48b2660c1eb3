"""A reply that comes after the parent gave up on its request is harmless: a child that answers
`initialize` late is `timeout` or `unresponsive` — what the parent decided — never `protocol`.

(Issue 15, bug 1: the endpoint forgot an abandoned request's id, so the late reply was taken
for an answer to an id never sent, a protocol fault ranked above the deadline. With 64 runs at
once on a loaded machine, about half of the timeouts came back `protocol`.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio

LATE = Path(__file__).parent.parent / "children" / "late_initialize.py"
GRACES = DisposePolicy(shutdown=0.3, eof=2.0, term=0.5, kill=1.0)
"""The EOF rung waits long enough for the late answer to arrive during the ladder."""


def late(seconds: float) -> list[str]:
    return [sys.executable, "-I", str(LATE), str(seconds)]


async def test_an_initialize_answered_after_the_wall_deadline_is_a_timeout(
    tmp_path: Path,
) -> None:
    async with Supervisor(ChildConfig(dispose=GRACES)) as sup:
        result = await sup.run(
            "go", workspace=tmp_path, command=late(1.5), limits=Limits(wall="1s")
        )
    assert result.failure is not None and result.failure.kind == "timeout", result
    assert result.failure.limit == "wall=1s"


async def test_an_initialize_answered_after_the_handshake_timeout_is_unresponsive(
    tmp_path: Path,
) -> None:
    config = ChildConfig(dispose=GRACES, handshake_timeout=0.5)
    async with Supervisor(config) as sup:
        result = await sup.run("go", workspace=tmp_path, command=late(1.0))
    assert result.failure is not None and result.failure.kind == "unresponsive", result
    assert result.failure.limit == "handshake=0.5s"


async def test_many_late_answers_at_once_each_keep_the_kind_the_parent_decided(
    tmp_path: Path,
) -> None:
    # Under load the late answer lands at every moment of the ladder; each run must still
    # report its own clock. Half hit the wall deadline, half the handshake timeout.
    runs = 24
    results: list[tuple[str, RunResult]] = []
    handshake = ChildConfig(dispose=GRACES, handshake_timeout=0.8)

    async def one(i: int) -> None:
        if i % 2:
            got = await sup.run(
                "go", workspace=tmp_path, command=late(1.6), limits=Limits(wall="1.2s")
            )
            results.append(("timeout", got))
        else:
            got = await sup.run("go", workspace=tmp_path, command=late(1.2), config=handshake)
            results.append(("unresponsive", got))

    with anyio.fail_after(90):
        async with Supervisor(ChildConfig(dispose=GRACES)) as sup, anyio.create_task_group() as tg:
            for i in range(runs):
                tg.start_soon(one, i)
    assert len(results) == runs
    wrong = [
        (want, r.failure.kind if r.failure else "success", r.message)
        for want, r in results
        if r.failure is None or r.failure.kind != want
    ]
    assert wrong == []
