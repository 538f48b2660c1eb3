"""The codec: `decode_line` classifies every shape; encode → decode round-trips every method."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tether.protocol import (
    METHODS,
    Decoder,
    ErrorCode,
    ErrorObject,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    Response,
    StreamFault,
    decode_line,
    decode_params,
    decode_result,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
)
from tether.protocol import messages as m

# --- realistic params/results for every method --------------------------------------------------

AGENT = m.AgentDefinition(
    type="explorer",
    description="Reads code and reports",
    model="scripted:todo",
    max_iterations=12,
    stop_conditions=["no_tool_calls"],
    tools=["read_file", "grep", "complete"],
    instructions="Find every TODO.\nReport them.",
    read_only=True,
    token_budget=50_000,
)
TRANSCRIPT = [
    m.ChatMessage(role="system", content="You are an explorer."),
    m.ChatMessage(role="user", content="Summarize the TODOs — ünïcödé ✓"),
    m.ChatMessage(
        role="assistant",
        tool_calls=[m.ToolCall(id="call_1", name="grep", arguments={"pattern": "TODO"})],
    ),
    m.ChatMessage(role="tool", content="src/a.py:3: # TODO x", tool_call_id="call_1"),
]
RUN_RESULT = m.RunResult(
    success=True,
    status="completed",
    summary="Two TODOs, both in src/a.py.",
    message="The agent called complete.",
    artifacts=[
        m.Artifact(path="notes.md", size=120, fs_type="file", modified_at="2024-05-01T12:00:00Z")
    ],
    skipped=[m.SkippedPath(path="../etc/passwd", reason="outside the workspace")],
    turn_count=3,
    iteration_count=2,
    usage=m.Usage(input_tokens=812, output_tokens=95),
    verdict="PASS",
    run_id="run-1",
)
FAILED_RESULT = m.RunResult(
    success=False,
    status="error",
    message="The child was killed by SIGKILL after the wall-clock limit of 30s.",
    failure=m.Failure(
        kind="timeout", signal="SIGKILL", rung="sigkill", limit="wall=30s", stderr_tail="..."
    ),
    run_id="run-2",
    containment="cgroup2",
)

SAMPLES: dict[str, tuple[Any, Any]] = {
    "initialize": (
        m.InitializeParams(
            protocol_version=1,
            client_info=m.PeerInfo(name="tether-parent", version="0.1.0"),
            capabilities=m.ClientCapabilities(model_broker=True, tool_approval=False),
            max_message_bytes=1 << 20,
        ),
        m.InitializeResult(
            protocol_version=1,
            server_info=m.PeerInfo(name="tether-child", version="0.1.0"),
            pid=4242,
            capabilities=m.ServerCapabilities(agent_message=True, tools=["read_file", "bash"]),
            max_message_bytes=1 << 20,
        ),
    ),
    "agent/run": (
        m.AgentRunParams(
            run_id="run-1",
            prompt="Summarize the TODOs",
            agent=AGENT,
            description="todo survey",
            workspace="/tmp/ws",
            history=TRANSCRIPT[:2],
            continuable=True,
        ),
        RUN_RESULT,
    ),
    "agent/message": (
        m.AgentMessageParams(run_id="run-1", message="And the FIXMEs?"),
        FAILED_RESULT,
    ),
    "agent/cancel": (m.AgentCancelParams(run_id="run-1", reason="user pressed ^C"), None),
    "ping": (m.Empty(), m.Empty()),
    "shutdown": (None, None),
    "exit": (None, None),
    "agent/event": (
        m.AgentEventParams(run_id="run-1", seq=7, kind="tool_call", data={"name": "grep"}),
        None,
    ),
    "model/complete": (
        m.ModelCompleteParams(
            run_id="run-1",
            messages=TRANSCRIPT,
            model="scripted:todo",
            tools=[
                m.ToolSpec(
                    name="complete",
                    description="Finish the run",
                    input_schema={"type": "object", "properties": {"summary": {"type": "string"}}},
                )
            ],
            purpose="turn",
        ),
        m.ModelCompleteResult(
            message=TRANSCRIPT[2],
            usage=m.Usage(input_tokens=100, output_tokens=20),
            stop_reason="tool_use",
        ),
    ),
    "tool/approve": (
        m.ToolApproveParams(run_id="run-1", tool="bash", arguments={"command": "rm -rf build"}),
        m.ToolApproveResult(allow=False, reason="no policy: denied by default"),
    ),
    "tool/call": (
        m.ToolCallParams(run_id="run-1", name="task", arguments={"prompt": "x"}, call_id="c1"),
        m.ToolCallResult(content='{"status": "completed"}'),
    ),
}


def test_there_is_a_sample_for_every_method_in_the_table() -> None:
    assert set(SAMPLES) == set(METHODS)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_round_trips_through_encode_and_typed_decode(method: str) -> None:
    spec = METHODS[method]
    params, result = SAMPLES[method]
    if spec.kind == "request":
        got = decode_line(encode_request(17, method, params))
        assert isinstance(got, Request)
        assert (got.id, got.method) == (17, method)
    else:
        got = decode_line(encode_notification(method, params))
        assert isinstance(got, Notification)
        assert got.method == method
    assert decode_params(method, got.params) == params
    if spec.kind == "request":
        reply = decode_line(encode_response("r-17", result))
        assert isinstance(reply, Response)
        assert reply.id == "r-17"
        assert decode_result(method, reply.result) == result


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_sample_encodes_to_a_single_newline_terminated_line(method: str) -> None:
    params, _ = SAMPLES[method]
    line = encode_request(1, method, params)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1


@pytest.mark.parametrize(
    ("method", "bad"),
    [
        ("initialize", {"protocolVersion": "one", "clientInfo": {"name": "x"}}),
        ("initialize", {"clientInfo": {"name": "x"}}),
        ("agent/run", {"runId": "r", "prompt": 5}),
        ("agent/event", {"runId": "r", "seq": 1, "kind": "gossip"}),
        ("model/complete", {"runId": "r", "messages": [{"role": "robot"}]}),
        ("tool/approve", {"runId": "r"}),
        ("agent/cancel", []),
        ("shutdown", {"now": True}),
    ],
)
def test_params_that_do_not_fit_raise_a_validation_error(method: str, bad: Any) -> None:
    got = decode_line(encode_request(1, method, bad))
    assert isinstance(got, Request)
    with pytest.raises(msgspec.ValidationError):
        decode_params(method, got.params)


def test_a_result_that_does_not_fit_raises_a_validation_error() -> None:
    got = decode_line(encode_response(1, {"allow": "maybe"}))
    assert isinstance(got, Response)
    with pytest.raises(msgspec.ValidationError):
        decode_result("tool/approve", got.result)


def test_missing_params_decode_as_an_empty_object() -> None:
    assert decode_params("ping", None) == m.Empty()
    with pytest.raises(msgspec.ValidationError):
        decode_params("agent/cancel", None)


@pytest.mark.parametrize("raw", [None, b"{}", b"[]", b"{ }", b"[\n]", b"null"])
def test_a_method_without_params_accepts_absent_or_empty_params(raw: bytes | None) -> None:
    assert decode_params("shutdown", None if raw is None else msgspec.Raw(raw)) is None


def test_decoding_params_of_an_unknown_method_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        decode_params("agent/fly", msgspec.Raw(b"{}"))


def test_unknown_fields_are_ignored_so_newer_peers_can_add_optional_ones() -> None:
    raw = msgspec.Raw(b'{"runId":"r","reason":"x","futureField":{"a":[1]}}')
    assert decode_params("agent/cancel", raw) == m.AgentCancelParams(run_id="r", reason="x")


def test_a_null_shutdown_result_decodes_to_none() -> None:
    got = decode_line(encode_response(3, None))
    assert isinstance(got, Response)
    assert bytes(got.result) == b"null"
    assert decode_result("shutdown", got.result) is None


# --- camelCase on the wire ----------------------------------------------------------------------


def _wire(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(msgspec.json.encode(obj))
    return out


def test_field_names_are_camel_case_on_the_wire() -> None:
    init = _wire(SAMPLES["initialize"][0])
    assert {"protocolVersion", "clientInfo", "maxMessageBytes", "capabilities"} <= set(init)
    assert set(init["capabilities"]) == {"modelBroker", "toolApproval"}
    run = _wire(SAMPLES["agent/run"][0])
    assert "runId" in run
    assert {"maxIterations", "stopConditions", "compactionModel", "readOnly", "tokenBudget"} <= set(
        run["agent"]
    )
    result = _wire(RUN_RESULT)
    assert {"turnCount", "iterationCount", "runId"} <= set(result)
    assert set(result["usage"]) == {"inputTokens", "outputTokens"}
    assert set(result["artifacts"][0]) == {"path", "size", "fsType", "modifiedAt", "inChangeSet"}
    failure = _wire(FAILED_RESULT)["failure"]
    assert {"exitCode", "stderrTail"} <= set(failure)
    msg = _wire(TRANSCRIPT[3])
    assert "toolCallId" in msg and "toolCalls" in msg
    assert "inputSchema" in _wire(SAMPLES["model/complete"][0])["tools"][0]
    assert "stopReason" in _wire(SAMPLES["model/complete"][1])


def _wire_structs() -> list[type[msgspec.Struct]]:
    return [
        tp
        for tp in vars(m).values()
        if isinstance(tp, type) and issubclass(tp, m.Wire) and tp is not m.Wire
    ]


@pytest.mark.parametrize("tp", _wire_structs(), ids=lambda tp: tp.__name__)
def test_every_message_field_has_a_camel_case_wire_name(tp: type[msgspec.Struct]) -> None:
    for f in msgspec.structs.fields(tp):
        assert "_" not in f.encode_name, (tp.__name__, f.name)
        assert f.encode_name[0].islower()
        assert f.encode_name.lower() == f.name.replace("_", "")


# --- encoding details ---------------------------------------------------------------------------


def test_a_request_without_params_omits_the_member() -> None:
    assert encode_request(1, "shutdown") == b'{"jsonrpc":"2.0","id":1,"method":"shutdown"}\n'
    assert encode_notification("exit") == b'{"jsonrpc":"2.0","method":"exit"}\n'


def test_an_error_without_data_omits_the_member() -> None:
    assert encode_error(5, ErrorCode.UNKNOWN_RUN, "unknown run: r") == (
        b'{"jsonrpc":"2.0","id":5,"error":{"code":-32003,"message":"unknown run: r"}}\n'
    )


def test_an_error_with_a_null_id_encodes_the_null() -> None:
    line = encode_error(None, ErrorCode.PARSE_ERROR, "Parse error")
    assert json.loads(line)["id"] is None


def test_newlines_in_strings_are_escaped_so_a_message_stays_one_line() -> None:
    line = encode_notification(
        "agent/event", {"runId": "r", "seq": 0, "kind": "text", "data": {"text": "a\nb\r\nc\u2028"}}
    )
    assert line.count(b"\n") == 1
    got = decode_line(line.rstrip(b"\n"))
    assert isinstance(got, Notification)
    assert decode_params("agent/event", got.params).data["text"] == "a\nb\r\nc\u2028"


def test_text_is_encoded_as_raw_utf8() -> None:
    line = encode_notification("x", {"t": "ünï ✓ 🙂"})
    assert "ünï ✓ 🙂".encode() in line


# --- classification -------------------------------------------------------------------------------


def test_a_line_with_method_and_id_is_a_request() -> None:
    got = decode_line(b'{"jsonrpc":"2.0","id":"a","method":"ping","params":{}}')
    assert isinstance(got, Request)
    assert (got.id, got.method, bytes(got.params or b"")) == ("a", "ping", b"{}")


def test_a_request_without_params_has_params_none() -> None:
    got = decode_line(b'{"jsonrpc":"2.0","id":0,"method":"shutdown"}')
    assert got == Request(0, "shutdown", None)


def test_a_line_with_method_and_no_id_is_a_notification() -> None:
    got = decode_line(b'{"jsonrpc":"2.0","method":"exit"}')
    assert got == Notification("exit", None)


def test_array_params_are_structurally_valid() -> None:
    got = decode_line(b'{"jsonrpc":"2.0","method":"x","params":[1,2]}')
    assert isinstance(got, Notification)
    assert got.params is not None and bytes(got.params) == b"[1,2]"


def test_a_line_with_result_and_id_is_a_response() -> None:
    got = decode_line(b'{"jsonrpc":"2.0","id":4,"result":{"allow":true}}')
    assert isinstance(got, Response)
    assert got.id == 4 and bytes(got.result) == b'{"allow":true}'


def test_a_line_with_error_is_an_error_response() -> None:
    got = decode_line(
        b'{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"Method not found",'
        b'"data":{"method":"x"}}}'
    )
    assert got == ErrorResponse(4, ErrorObject(-32601, "Method not found", {"method": "x"}))


def test_an_error_response_may_carry_a_null_id() -> None:
    got = decode_line(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse"}}')
    assert got == ErrorResponse(None, ErrorObject(-32700, "Parse"))


def test_member_order_does_not_matter() -> None:
    got = decode_line(b'{"method":"ping","id":9,"jsonrpc":"2.0"}')
    assert got == Request(9, "ping", None)


def test_whitespace_around_members_is_allowed() -> None:
    got = decode_line(b' { "jsonrpc" : "2.0" , "id" : 1 , "method" : "x" , "params" : { } } ')
    assert isinstance(got, Request)
    assert got.params is not None and bytes(got.params) == b"{ }"


INVALID: list[tuple[str, bytes, ErrorCode, int | str | None]] = [
    ("not json", b"hello", ErrorCode.PARSE_ERROR, None),
    ("truncated json", b'{"jsonrpc":"2.0","id":1,"meth', ErrorCode.PARSE_ERROR, None),
    ("invalid utf-8", b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', ErrorCode.PARSE_ERROR, None),
    (
        "a top-level array (batch)",
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    ("a top-level number", b"42", ErrorCode.INVALID_REQUEST, None),
    ("a top-level string", b'"ping"', ErrorCode.INVALID_REQUEST, None),
    ("a top-level null", b"null", ErrorCode.INVALID_REQUEST, None),
    ("missing jsonrpc", b'{"id":3,"method":"ping"}', ErrorCode.INVALID_REQUEST, 3),
    ("jsonrpc 1.0", b'{"jsonrpc":"1.0","id":"x","method":"ping"}', ErrorCode.INVALID_REQUEST, "x"),
    (
        "jsonrpc as a number",
        b'{"jsonrpc":2.0,"id":3,"method":"ping"}',
        ErrorCode.INVALID_REQUEST,
        3,
    ),
    (
        "both method and result",
        b'{"jsonrpc":"2.0","id":5,"method":"ping","result":{}}',
        ErrorCode.INVALID_REQUEST,
        5,
    ),
    (
        "both method and error",
        b'{"jsonrpc":"2.0","id":5,"method":"ping","error":{"code":1,"message":"m"}}',
        ErrorCode.INVALID_REQUEST,
        5,
    ),
    (
        "both result and error",
        b'{"jsonrpc":"2.0","id":6,"result":1,"error":{"code":1,"message":"m"}}',
        ErrorCode.INVALID_REQUEST,
        6,
    ),
    (
        "a null request id",
        b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    ("a float id", b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', ErrorCode.INVALID_REQUEST, None),
    (
        "a boolean id",
        b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    ("a numeric method", b'{"jsonrpc":"2.0","id":7,"method":7}', ErrorCode.INVALID_REQUEST, 7),
    (
        "string params",
        b'{"jsonrpc":"2.0","id":8,"method":"ping","params":"x"}',
        ErrorCode.INVALID_REQUEST,
        8,
    ),
    (
        "number params",
        b'{"jsonrpc":"2.0","id":8,"method":"ping","params":1}',
        ErrorCode.INVALID_REQUEST,
        8,
    ),
    (
        "null params",
        b'{"jsonrpc":"2.0","id":8,"method":"shutdown","params":null}',
        ErrorCode.INVALID_REQUEST,
        8,
    ),
    ("a result without id", b'{"jsonrpc":"2.0","result":{}}', ErrorCode.INVALID_REQUEST, None),
    (
        "a result with a null id",
        b'{"jsonrpc":"2.0","id":null,"result":{}}',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    (
        "a malformed error object",
        b'{"jsonrpc":"2.0","id":9,"error":"boom"}',
        ErrorCode.INVALID_REQUEST,
        9,
    ),
    (
        "an error code that is not an integer",
        b'{"jsonrpc":"2.0","id":9,"error":{"code":"x","message":"m"}}',
        ErrorCode.INVALID_REQUEST,
        9,
    ),
    ("an empty object", b"{}", ErrorCode.INVALID_REQUEST, None),
    ("only jsonrpc and id", b'{"jsonrpc":"2.0","id":10}', ErrorCode.INVALID_REQUEST, 10),
    (
        "nesting deeper than the depth limit",
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}",
        ErrorCode.INVALID_REQUEST,
        1,
    ),
    (
        "nesting one level past the depth limit",
        b'{"jsonrpc":"2.0","id":"d","method":"x","params":' + b"[" * 128 + b"]" * 128 + b"}",
        ErrorCode.INVALID_REQUEST,
        "d",
    ),
    ("unbalanced deep nesting", b"[" * 100_000, ErrorCode.INVALID_REQUEST, None),
]


@pytest.mark.parametrize(("case", "line", "code", "rid"), INVALID, ids=[c[0] for c in INVALID])
def test_every_invalid_shape_is_classified_with_its_code_and_recovered_id(
    case: str, line: bytes, code: ErrorCode, rid: int | str | None
) -> None:
    got = decode_line(line)
    assert isinstance(got, Invalid), case
    assert got.code == code
    assert got.id == rid
    assert got.line == line
    assert got.message


def test_invalid_messages_carry_no_library_traceback() -> None:
    for _, line, _, _ in INVALID:
        got = decode_line(line)
        assert isinstance(got, Invalid)
        assert "Traceback" not in got.message


# --- the Decoder: framing plus classification ----------------------------------------------------


def test_the_decoder_turns_an_oversize_line_into_a_message_too_large_fault() -> None:
    dec = Decoder(max_message_bytes=32)
    out = dec.feed(b'{"jsonrpc":"2.0","method":"x","params":{"pad":"' + b"p" * 64 + b'"}}\n')
    out += dec.feed(b'{"jsonrpc":"2.0","method":"y"}\n')
    assert len(out) == 2
    assert isinstance(out[0], StreamFault) and out[0].code == ErrorCode.MESSAGE_TOO_LARGE
    assert "32" in out[0].message
    assert out[1] == Notification("y", None)


def test_the_decoder_turns_a_content_length_header_into_a_wrong_framing_fault() -> None:
    (fault, *_) = Decoder().feed(b"Content-Length: 30\r\n\r\n")
    assert isinstance(fault, StreamFault)
    assert fault.code == ErrorCode.WRONG_FRAMING
    assert "Content-Length" in fault.message


def test_the_decoder_returns_the_truncated_tail_at_eof() -> None:
    dec = Decoder()
    assert dec.feed(b'{"jsonrpc":"2.0","method":"exit"}\n{"jsonrpc":') == [Notification("exit")]
    assert dec.eof() == b'{"jsonrpc":'
