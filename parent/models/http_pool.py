"""The kept-alive HTTP client that models built from strings share while a supervisor is open.

A model given a client of its own (`client=`) uses it. One built from a model string has none:
inside an open `Supervisor` (whose life is a `pooled()` scope) its turns share one client per
event loop, so every turn after the first to the same API reuses a connection instead of
paying a TCP (and TLS) handshake: on a remote API, round trips that cost more than tether's
whole share of a turn. The client is made on first use the way a turn's own would be
(`_http._client`: the one verifying context, httpx's client where the environment names a
proxy), with no cap on connections
(a fleet's turns are not queued behind each other), and closed when the last scope of its event
loop ends, so nothing of it outlives the supervisors that used it. Outside every scope a turn
has a client of its own, closed after it (`_http.post_json`).

This module imports no HTTP library: a supervisor that never calls an HTTP model loads none.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Protocol, TypeVar, cast

import anyio
from anyio.lowlevel import RunVar

KEEP_ALIVE_CONNECTIONS = 64
"""Idle connections kept open (per event loop)."""
KEEP_ALIVE_SECONDS = 30.0
"""How long an idle connection is kept: a run's turns are seconds apart."""


class Client(Protocol):
    @property
    def is_closed(self) -> bool: ...

    async def aclose(self) -> None: ...


C = TypeVar("C", bound=Client)


class _Pool:
    """One event loop's shared client, and how many scopes hold it open."""

    def __init__(self) -> None:
        self.scopes = 0
        self.client: Client | None = None


_POOL: RunVar[_Pool | None] = RunVar("tether_model_http_pool", default=None)


@contextlib.asynccontextmanager
async def pooled() -> AsyncIterator[None]:
    """Within it, models without a client of their own share this event loop's kept-alive
    client; scopes nest, and the last one to end closes it (shielded)."""
    pool = _POOL.get()
    if pool is None:
        pool = _Pool()
        _POOL.set(pool)
    pool.scopes += 1
    try:
        yield
    finally:
        pool.scopes -= 1
        if pool.scopes == 0 and pool.client is not None:
            client, pool.client = pool.client, None
            with anyio.CancelScope(shield=True):
                await client.aclose()


def pooled_client(make: Callable[[int, float], C]) -> C | None:
    """This event loop's shared client while a `pooled()` scope is open (made on first use by
    `make(idle connections kept, seconds each is kept)`); `None` outside every scope."""
    pool = _POOL.get()
    if pool is None or pool.scopes == 0:
        return None
    if pool.client is None or pool.client.is_closed:
        pool.client = make(KEEP_ALIVE_CONNECTIONS, KEEP_ALIVE_SECONDS)
    return cast(C, pool.client)  # every caller makes it with the one `_http._client`
