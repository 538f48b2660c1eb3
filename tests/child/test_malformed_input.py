"""Malformed input gets the proper JSON-RPC error, and the child keeps serving after it."""

from __future__ import annotations

import pytest
from child_harness import ChildProcess

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
MESSAGE_TOO_LARGE = -32006
WRONG_FRAMING = -32007


@pytest.mark.parametrize(
    ("line", "code", "id"),
    [
        pytest.param(b"this is not json", PARSE_ERROR, None, id="not-json"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 7, "meth', PARSE_ERROR, None, id="truncated-json"),
        pytest.param(
            b'{"jsonrpc": "1.0", "id": 7, "method": "ping"}', INVALID_REQUEST, 7, id="wrong-version"
        ),
        pytest.param(
            b'{"jsonrpc": "2.0", "id": 7, "method": 5}',
            INVALID_REQUEST,
            7,
            id="method-not-a-string",
        ),
        pytest.param(
            b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": 3}',
            INVALID_REQUEST,
            7,
            id="params-not-structured",
        ),
        pytest.param(b"[1, 2]", INVALID_REQUEST, None, id="batch"),
        pytest.param(
            b'{"jsonrpc": "2.0", "id": 7, "method": "no/such"}',
            METHOD_NOT_FOUND,
            7,
            id="unknown-method",
        ),
        pytest.param(
            b'{"jsonrpc": "2.0", "id": 7, "method": "agent/run", "params": {"runId": 1}}',
            INVALID_PARAMS,
            7,
            id="bad-params",
        ),
        pytest.param(
            b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": [1]}',
            INVALID_PARAMS,
            7,
            id="positional-params",
        ),
    ],
)
def test_malformed_input_gets_the_proper_error_and_the_child_keeps_serving(
    line: bytes, code: int, id: int | None
) -> None:
    with ChildProcess() as child:
        child.initialize()
        child.send_raw(line + b"\n")
        error = child.read()
        assert error["id"] == id
        assert error["error"]["code"] == code
        assert "Traceback" not in error["error"]["message"]
        assert child.call("ping")["result"] == {}


def test_error_messages_carry_no_library_text() -> None:
    with ChildProcess() as child:
        child.initialize()
        response = child.call("no/such/method")
        # jsonrpcserver would say "Method not found" with the name as data; we say it ourselves.
        assert response["error"] == {
            "code": METHOD_NOT_FOUND,
            "message": "Method not found: no/such/method",
        }


def test_an_oversized_line_gets_message_too_large_and_the_child_keeps_serving() -> None:
    with ChildProcess() as child:
        child.initialize()
        cap = 32 * 1024 * 1024  # the default the child announces
        child.send_raw(
            b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "pad": "' + b"x" * cap + b'"}\n'
        )
        error = child.read(timeout=30)
        assert error["id"] is None
        assert error["error"]["code"] == MESSAGE_TOO_LARGE
        assert child.call("ping")["result"] == {}


def test_content_length_framing_gets_wrong_framing_and_the_child_exits_non_zero() -> None:
    with ChildProcess() as child:
        child.send_raw(b"Content-Length: 40\r\n\r\n")
        error = child.read()
        assert error["id"] is None
        assert error["error"]["code"] == WRONG_FRAMING
        assert child.wait_exit() not in (0, None)
