"""Error codes of the wire protocol and the exceptions named by who is to blame.

Every value of `ErrorCode` is part of the contract with other languages: a test pins each one.
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
