"""A line from the child past tether's depth limit is a clean protocol failure in the parent.

Real children under a real `Supervisor`; the child runs under `sys.executable`, so every
interpreter the suite runs on exercises its own parent and child.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol import DEFAULT_MAX_MESSAGE_DEPTH

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).parent.parent / "children" / "deep_event.py"
CONFIG = ChildConfig(
    dispose=DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0), handshake_timeout=10.0
)


def depth_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


async def run_deep_event(workspace: Path, depth: int) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    async with Supervisor(CONFIG) as sup:
        with anyio.fail_after(30):
            result = await sup.run(
                "send a deep event",
                workspace=workspace,
                command=[sys.executable, "-I", str(CHILD), str(depth)],
                on_event=events.append,
            )
    return result, events


async def test_an_event_past_the_depth_limit_fails_the_run_as_a_protocol_error(
    tmp_path: Path,
) -> None:
    result, events = await run_deep_event(tmp_path, DEFAULT_MAX_MESSAGE_DEPTH + 1)

    assert result.success is False
    assert result.failure is not None
    assert result.failure.kind == "protocol"
    assert "nested deeper than the limit of 128 levels" in result.message
    assert not [e for e in events if isinstance(e, ChildEvent)]


async def test_an_event_exactly_at_the_depth_limit_reaches_the_caller(tmp_path: Path) -> None:
    result, events = await run_deep_event(tmp_path, DEFAULT_MAX_MESSAGE_DEPTH)

    assert result.success is True, result
    (event,) = [e for e in events if isinstance(e, ChildEvent)]
    # The data object and the arrays inside it: all but the envelope and params levels.
    assert depth_of(event.data) == DEFAULT_MAX_MESSAGE_DEPTH - 2
