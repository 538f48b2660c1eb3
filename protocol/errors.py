"""Error codes of the wire protocol and the exceptions named by who is to blame.

Every value of `ErrorCode` is part of the contract with other languages: a test pins each one.

One vocabulary per direction, the same on both sides of the wire:

- `WireError`: an error *this* side means to send in answer to the peer's request (a handler
  raises it; the side's one mapping turns it into an error response);
- `RemoteError`: the error object the *peer* answered one of our requests with;
- `RemoteProtocolError` / `LocalProtocolError`: the peer / this side broke the protocol;
- `ConnectionClosed`: the conversation ended while a request was still waiting for its answer.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    # JSON-RPC 2.0
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    # tether's application band, -32000 ... -32099
    NOT_INITIALIZED = -32000
    ALREADY_INITIALIZED = -32001
    UNSUPPORTED_VERSION = -32002
    UNKNOWN_RUN = -32003
    RUN_BUSY = -32004
    SHUTTING_DOWN = -32005
    MESSAGE_TOO_LARGE = -32006
    WRONG_FRAMING = -32007
    NO_MODEL = -32008
    MODEL_ERROR = -32009
    CONNECTION_CLOSED = -32010
    REQUEST_TIMEOUT = -32011
    BUDGET_EXHAUSTED = -32012
    RUN_IDLE = -32013


class ProtocolError(Exception):
    """Base of the errors about what crossed (or failed to cross) the wire."""

    code: ErrorCode = ErrorCode.INVALID_REQUEST

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class LocalProtocolError(ProtocolError):
    """This side was about to break the protocol (e.g. a message over the peer's byte cap)."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol: garbage, an oversized line, wrong framing, a bad reply."""


class RemoteError(Exception):
    """The peer answered a request with a JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


class WireError(Exception):
    """An error this side means to send in answer to the peer's request: code, message and
    typed `data`. Handlers raise it for every refusal the protocol defines."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class ConnectionClosed(Exception):
    """The peer's stream ended (or broke, or this side closed it) while a request was waiting
    for its answer; the message says why."""
