"""The egress proxy's events: one per decision, on the supervisor's event stream.

Standard library only: the event stream knows this type whether or not a run ever starts a
proxy (`tether.parent.run.events`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NetKind = Literal["net.allowed", "net.denied"]
Via = Literal["tunnel", "http", "credential", ""]


@dataclass(frozen=True)
class NetEvent:
    """One decision of a run's egress proxy, on the supervisor's event stream."""

    run_id: str
    kind: NetKind
    host: str
    port: int
    reason: str = ""
    """Why it was refused (`net.denied`)."""
    address: str = ""
    """The address the connection was pinned to (`net.allowed`)."""
    via: Via = ""
    """A `CONNECT` tunnel, a plain HTTP request, or a request the proxy added a credential to."""
    bytes_up: int = 0
    bytes_down: int = 0

    @property
    def name(self) -> str:
        return self.kind


__all__ = ["NetEvent", "NetKind", "Via"]
