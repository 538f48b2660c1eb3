"""The child's own error type, and the one place that turns any exception into a wire error.

Handlers raise `WireError` for every refusal the protocol defines. Anything else that escapes a
handler is a bug in the child: its traceback goes to stderr (the parent keeps a tail of it) and
the wire only ever sees a fixed sentence, never library text or a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from tether.protocol import ErrorCode, ProtocolError

log = logging.getLogger("tether.child")

INTERNAL_MESSAGE = "internal error in the child runtime (details are on its stderr)"


class WireError(Exception):
    """A JSON-RPC error this child means to send: code, message and typed `data`."""

    def __init__(self, code: ErrorCode, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def to_wire_error(exc: BaseException, method: str) -> WireError:
    """Map an exception raised while serving `method` to the error the parent will see."""
    if isinstance(exc, WireError):
        return exc
    if isinstance(exc, msgspec.ValidationError | msgspec.DecodeError):
        # msgspec's message names the field and the expected type (e.g. "Expected `str`, got
        # `int` - at `$.runId`"): it describes the parent's own input, so it is safe and useful.
        return WireError(ErrorCode.INVALID_PARAMS, f"Invalid params for {method}: {exc}")
    if isinstance(exc, ProtocolError):
        return WireError(exc.code, exc.message)
    log.error("unexpected error while serving %s", method, exc_info=exc)
    return WireError(ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)


def not_initialized(method: str) -> WireError:
    return WireError(ErrorCode.NOT_INITIALIZED, f"not initialized: send initialize before {method}")
