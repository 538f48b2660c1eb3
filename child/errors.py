"""The one place in the child that turns any exception into the wire error the parent sees.

Handlers raise `tether.protocol.WireError` for every refusal the protocol defines. Anything
else that escapes a handler is a bug in the child: its traceback goes to stderr (the parent
keeps a tail of it) and the wire only ever sees a fixed sentence, never library text or a
traceback.
"""

from __future__ import annotations

import logging

from tether.protocol import ErrorCode, ProtocolError, WireError

log = logging.getLogger("tether.child")

INTERNAL_MESSAGE = "internal error in the child runtime (details are on its stderr)"


def to_wire_error(exc: BaseException, method: str) -> WireError:
    """Map an exception raised while serving `method` to the error the parent will see."""
    if isinstance(exc, WireError):
        return exc
    if isinstance(exc, ProtocolError):
        return WireError(exc.code, exc.message)
    log.error("unexpected error while serving %s", method, exc_info=exc)
    return WireError(ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)


def not_initialized(method: str) -> WireError:
    return WireError(ErrorCode.NOT_INITIALIZED, f"not initialized: send initialize before {method}")
