"""Parent-side helpers for runs of `agents.py:act` (not collected: no `test_` prefix): start
one, wait for the `report` event its prompt makes it send, read the child's /proc files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from tether.parent.events import ChildEvent, Event
from tether.parent.supervisor import RunHandle, Supervisor

HERE = Path(__file__).parent
ACT = f"{HERE / 'agents.py'}:act"


async def start_and_wait_for_report(
    sup: Supervisor, prompt: str, *, deadline: float, **kwargs: Any
) -> tuple[RunHandle, dict[str, Any]]:
    """`sup.start(prompt)` with the `act` agent in this directory, and its first report."""
    reports: list[dict[str, Any]] = []

    def on_event(ev: Event) -> None:
        if isinstance(ev, ChildEvent) and ev.kind == "report":
            reports.append(ev.data)

    handle = await sup.start(prompt, agent=ACT, workspace=HERE, on_event=on_event, **kwargs)
    with anyio.fail_after(deadline):
        while not reports:
            assert not handle.done, await handle.result()
            await anyio.sleep(0.01)
    return handle, reports[0]


def status_field(pid: int, name: str) -> str:
    """One field of /proc/PID/status, as written there."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {name} in /proc/{pid}/status")
