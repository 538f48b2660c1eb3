"""The child's reader enforces tether's depth limit itself, whatever the interpreter running it.

The child runs under the interpreter of the test run (`sys.executable`), so each interpreter the
suite runs on checks its own child.
"""

from __future__ import annotations

from child_harness import ChildProcess

from tether.protocol import DEFAULT_MAX_MESSAGE_DEPTH

INVALID_REQUEST = -32600


def ping_nested(levels: int, rid: int) -> bytes:
    """A ping whose line nests `levels` deep: envelope, params, then arrays (built as bytes: the
    stdlib's own json could not encode a value this deep)."""
    arrays = b"[" * (levels - 2) + b"]" * (levels - 2)
    return b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"pad":%s}}' % (rid, arrays)


def test_the_child_announces_its_depth_limit_in_initialize() -> None:
    with ChildProcess() as child:
        result = child.initialize()["result"]
        assert result["maxMessageDepth"] == DEFAULT_MAX_MESSAGE_DEPTH
        assert result["maxMessageBytes"] > 0


def test_a_request_past_the_depth_limit_is_refused_with_its_id_and_the_child_keeps_serving() -> (
    None
):
    with ChildProcess() as child:
        child.initialize()
        child.send_raw(ping_nested(DEFAULT_MAX_MESSAGE_DEPTH + 1, rid=5) + b"\n")
        error = child.response(5)
        assert error["error"]["code"] == INVALID_REQUEST
        assert "nested deeper than the limit of 128 levels" in error["error"]["message"]
        # A recursion bomb far past any interpreter's own guard gets the same answer.
        child.send_raw(ping_nested(20_000, rid=6) + b"\n")
        assert child.response(6)["error"]["code"] == INVALID_REQUEST
        assert child.call("ping")["result"] == {}


def test_a_request_exactly_at_the_depth_limit_is_served() -> None:
    with ChildProcess() as child:
        child.initialize()
        child.send_raw(ping_nested(DEFAULT_MAX_MESSAGE_DEPTH, rid=8) + b"\n")
        assert child.response(8)["result"] == {}
