"""Child transports: how a run obtains its child (the seam: `base.py`), a local process
(`local.py`) or tether's child runtime in memory (`memory.py`)."""

from __future__ import annotations

from collections.abc import Mapping

from tether.parent.run.transport.base import (
    ChildLink,
    ChildRequest,
    ChildTransport,
    ObtainedChild,
    ProcessHost,
    Registrar,
)
from tether.parent.run.transport.local import LocalProcess
from tether.parent.run.transport.memory import InMemory

PROCESS = "process"
MEMORY = "memory"


def builtin_transports() -> dict[str, ChildTransport]:
    """The transports every supervisor knows, by the name a `ChildConfig.transport` gives."""
    return {PROCESS: LocalProcess(), MEMORY: InMemory()}


def transport_named(transports: Mapping[str, ChildTransport], name: str) -> ChildTransport:
    """The transport `name` names; raises `ValueError` (bad usage) naming the known ones."""
    found = transports.get(name)
    if found is None:
        known = ", ".join(repr(n) for n in transports) or "none"
        raise ValueError(f"transport {name!r}: expected one of {known}")
    return found


__all__ = [
    "MEMORY",
    "PROCESS",
    "ChildLink",
    "ChildRequest",
    "ChildTransport",
    "InMemory",
    "LocalProcess",
    "ObtainedChild",
    "ProcessHost",
    "Registrar",
    "builtin_transports",
    "transport_named",
]
