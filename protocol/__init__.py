"""tether's wire protocol v1, sans-I/O: message types, framing, codec, error codes, schema.

This package imports only the standard library and msgspec, so any transport (anyio pipes in
the parent, the child's stdio server, a test) can drive it.
"""

from tether.protocol.codec import (
    Decoder,
    Envelope,
    ErrorObject,
    ErrorResponse,
    Incoming,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
    StreamFault,
    classify,
    decode_line,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
)
from tether.protocol.connection import Connection
from tether.protocol.depth import DEFAULT_MAX_MESSAGE_DEPTH, exceeds_depth
from tether.protocol.errors import (
    ConnectionClosed,
    ErrorCode,
    LocalProtocolError,
    ProtocolError,
    RemoteError,
    RemoteProtocolError,
    WireError,
)
from tether.protocol.framing import DEFAULT_MAX_MESSAGE_BYTES, LineFramer, Oversize, WrongFraming
from tether.protocol.messages import PROTOCOL_VERSION, SUPPORTED_VERSIONS
from tether.protocol.methods import METHODS, MethodSpec, decode_params, decode_result

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_MESSAGE_DEPTH",
    "METHODS",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "Connection",
    "ConnectionClosed",
    "Decoder",
    "Envelope",
    "ErrorCode",
    "ErrorObject",
    "ErrorResponse",
    "Incoming",
    "Invalid",
    "LineFramer",
    "LocalProtocolError",
    "MethodSpec",
    "Notification",
    "Oversize",
    "ProtocolError",
    "RemoteError",
    "RemoteProtocolError",
    "Request",
    "RequestId",
    "Response",
    "StreamFault",
    "WireError",
    "WrongFraming",
    "classify",
    "decode_line",
    "decode_params",
    "decode_result",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_response",
    "exceeds_depth",
]
