"""The wire's I/O layer, shared by both sides: byte streams (pipe fds, in-memory) and the
endpoint that pumps a sans-I/O `tether.protocol.Connection` over them.

Depends on the standard library, anyio, msgspec and `tether.protocol` only; `tether.parent` and
`tether.child` both build on it and never on each other.
"""

from tether.wire.endpoint import Endpoint, StreamEnd
from tether.wire.streams import (
    FdReceiveStream,
    FdSendStream,
    MemoryReceiveStream,
    MemorySendStream,
    memory_pipe,
)

__all__ = [
    "Endpoint",
    "FdReceiveStream",
    "FdSendStream",
    "MemoryReceiveStream",
    "MemorySendStream",
    "StreamEnd",
    "memory_pipe",
]
