"""Parent-side helpers of the zygote tests (not collected: no `test_` prefix): start a run of
`agents.py:act` and wait for the `report` event its prompt makes it send, read a child's /proc
files and command line, tell whether a process is gone, find cgroups by name."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import psutil

from tether.parent.process.host import host
from tether.parent.run.events import ChildEvent, Event
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


def cmdline(pid: int, deadline: float = 10.0) -> list[str]:
    """What /proc/PID/cmdline shows, read again while it is empty: a process caught in its exec
    shows none for a moment (the kernel has yet to lay out the new stack the arguments live
    in). Empty for a process gone meanwhile."""
    until = time.monotonic() + deadline
    while True:
        try:
            words = psutil.Process(pid).cmdline()
        except psutil.Error:
            return []
        if words:
            return words
        assert time.monotonic() < until, f"{pid} shows no command line"
        time.sleep(0.001)


def gone_or_zombie(pid: int) -> bool:
    """Whether `pid` no longer runs (gone, or a zombie nobody has reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def cgroups_named(prefix: str) -> list[Path]:
    """The cgroup directories, in every hierarchy this host gives tether, whose name starts
    with `prefix` (`tether-<supervisor pid>-...`)."""
    return [
        d
        for parent in host().parents.values()
        if parent.is_dir()
        for d in parent.iterdir()
        if d.name.startswith(prefix) and d.is_dir()
    ]
