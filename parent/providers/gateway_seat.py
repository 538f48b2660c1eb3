"""One model gateway per supervisor, started the first time a foreign agent needs it.

The gateway's server lives in a task of the supervisor's own task group (a task group must be
left by the task that entered it, so the gateway cannot simply be entered by whichever run
asked first and left by the supervisor). `get()` starts that task once and hands everyone the
same `Gateway`; `close()` tells it to stop, and the supervisor's group waits for it (requests
in progress get the server's close grace). The gateway's modules (h11, the API translations)
are imported when it first starts, never by a supervisor that runs no foreign agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

if TYPE_CHECKING:
    from tether.parent.gateway.server import Gateway


class GatewaySeat:
    def __init__(self) -> None:
        self._gateway: Gateway | None = None
        self._lock = anyio.Lock()
        self._stop = anyio.Event()

    @property
    def running(self) -> Gateway | None:
        """The gateway, if it was started."""
        return self._gateway

    async def get(self, tg: TaskGroup) -> Gateway:
        """The gateway, started in `tg` on the first call."""
        async with self._lock:
            if self._stop.is_set():
                raise RuntimeError("the supervisor is closing: no gateway")
            if self._gateway is None:
                self._gateway = await tg.start(self._serve)
            return self._gateway

    async def _serve(self, *, task_status: TaskStatus[Gateway]) -> None:
        from tether.parent.gateway.server import Gateway

        async with Gateway() as gateway:
            task_status.started(gateway)
            await self._stop.wait()

    def close(self) -> None:
        """Stop the gateway (the task that runs it ends; its group waits for that)."""
        self._stop.set()
