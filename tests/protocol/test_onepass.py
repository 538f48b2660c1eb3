"""One-pass decoding is only a quicker way to the same events: whatever the line, a
connection sees exactly what the two-step path (envelope, then typed params/result) gives."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.protocol import Connection, encode_request, encode_response
from tether.protocol import messages as m
from tether.protocol.connection import RequestReceived, ResponseReceived
from tether.protocol.onepass import UNSET, IncomingDecoder, peek_id

PROPS = settings(
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VALID_PARAMS: dict[str, Any] = {
    "initialize": m.InitializeParams(protocol_version=1, client_info=m.PeerInfo(name="t")),
    "agent/run": m.AgentRunParams(run_id="r", prompt="p"),
    "agent/message": m.AgentMessageParams(run_id="r", message="more"),
    "agent/cancel": m.AgentCancelParams(run_id="r"),
    "ping": m.Empty(),
    "agent/event": m.AgentEventParams(run_id="r", seq=1, kind="step", data={"i": 1}),
    "model/complete": m.ModelCompleteParams(
        run_id="r", messages=[m.ChatMessage(role="user", content="hi")]
    ),
    "tool/approve": m.ToolApproveParams(run_id="r", tool="bash", arguments={"c": "ls"}),
    "tool/call": m.ToolCallParams(run_id="r", call_id="c", name="task", arguments={}),
}
VALID_RESULTS: dict[str, Any] = {
    "ping": m.Empty(),
    "model/complete": m.ModelCompleteResult(
        message=m.ChatMessage(role="assistant", content="hi"), usage=m.Usage(1, 1)
    ),
    "tool/approve": m.ToolApproveResult(allow=True),
    "tool/call": m.ToolCallResult(content="done"),
    "agent/run": m.RunResult(success=True, status="completed", run_id="r"),
}
METHOD_NAMES = [*VALID_PARAMS, "shutdown", "exit", "nope"]

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
MISSING = object()
maybe = st.just(MISSING)


def _builtins(value: Any) -> Any:
    return msgspec.to_builtins(value)


@st.composite
def params_for(draw: st.DrawFn, method: str) -> Any:
    valid = VALID_PARAMS.get(method)
    options = [maybe, json_values, st.just({}), st.just([])]
    if valid is not None:
        options += [st.just(_builtins(valid))] * 4
        # a valid payload with one member broken or an extra member
        options.append(
            st.builds(
                lambda extra, v: {**_builtins(valid), **extra},
                st.dictionaries(st.sampled_from(["runId", "seq", "x", "prompt"]), json_values),
                st.none(),
            )
        )
    return draw(st.one_of(*options))


NOTIFICATIONS = {"agent/cancel", "agent/event", "exit"}


@st.composite
def plain_lines(draw: st.DrawFn) -> bytes:
    """A valid request or notification, in any member order, sometimes with one member
    changed, dropped or added."""
    method = draw(st.sampled_from(METHOD_NAMES))
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if method not in NOTIFICATIONS:
        msg["id"] = draw(st.one_of(st.integers(0, 2**40), st.text(max_size=3)))
    if method in VALID_PARAMS:
        msg["params"] = _builtins(VALID_PARAMS[method])
    change = draw(st.sampled_from([None, None, "jsonrpc", "id", "params", "result", "error"]))
    if change is not None:
        value = draw(st.one_of(maybe, json_values))
        if value is MISSING:
            msg.pop(change, None)
        else:
            msg[change] = value
    keys = draw(st.permutations(list(msg)))
    return msgspec.json.encode({k: msg[k] for k in keys}) + b"\n"


@st.composite
def incoming_lines(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(METHOD_NAMES))
    msg: dict[str, Any] = {}
    members = {
        "jsonrpc": st.one_of(st.just("2.0"), st.just("2.0"), st.just("1.0"), maybe, st.integers()),
        "id": st.one_of(st.integers(0, 3), st.text(max_size=2), st.none(), maybe, st.booleans()),
        "method": st.one_of(*[st.just(method)] * 6, maybe, st.integers()),
        "params": params_for(method),
        "result": st.one_of(*[maybe] * 6, json_values),
        "error": st.one_of(*[maybe] * 6, st.just({"code": 1, "message": "x"}), json_values),
    }
    order = draw(st.permutations(list(members)))
    for key in order:
        value = draw(members[key])
        if value is not MISSING:
            msg[key] = value
    return msgspec.json.encode(msg) + b"\n"


@st.composite
def reply_lines(draw: st.DrawFn) -> tuple[str, bytes]:
    method = draw(st.sampled_from(list(VALID_RESULTS)))
    msg: dict[str, Any] = {}
    members = {
        "jsonrpc": st.one_of(*[st.just("2.0")] * 4, st.just("1.0"), maybe),
        "id": st.one_of(*[st.just(1)] * 4, st.just("1"), st.integers(0, 3), st.none(), maybe),
        "result": st.one_of(
            *[st.just(_builtins(VALID_RESULTS[method]))] * 4, maybe, json_values, st.just({})
        ),
        "error": st.one_of(*[maybe] * 6, st.just({"code": 1, "message": "x"}), json_values),
        "method": st.one_of(*[maybe] * 8, st.just(method)),
        "params": st.one_of(*[maybe] * 4, json_values),
    }
    order = draw(st.permutations(list(members)))
    for key in order:
        value = draw(members[key])
        if value is not MISSING:
            msg[key] = value
    return method, msgspec.json.encode(msg) + b"\n"


def _two_step(conn: Connection) -> Connection:
    conn._one_pass = lambda line, head: None  # type: ignore[method-assign]
    return conn


@PROPS
@given(st.one_of(plain_lines(), incoming_lines()), st.sampled_from(["parent", "child"]))
def test_a_request_or_notification_gives_the_same_event_in_one_pass_as_in_two(
    line: bytes, role: str
) -> None:
    one = Connection(role)  # type: ignore[arg-type]
    two = _two_step(Connection(role))  # type: ignore[arg-type]
    assert one.receive_data(line) == two.receive_data(line)


@PROPS
@given(reply_lines())
def test_a_reply_gives_the_same_event_in_one_pass_as_in_two(case: tuple[str, bytes]) -> None:
    method, line = case
    role = "child" if method in ("model/complete", "tool/approve", "tool/call") else "parent"
    conns = [Connection(role), _two_step(Connection(role))]  # type: ignore[arg-type]
    for conn in conns:
        conn.send_request(method, VALID_PARAMS.get(method, m.Empty()))
    one, two = (conn.receive_data(line) for conn in conns)
    assert one == two
    assert conns[0].pending == conns[1].pending


def test_a_plain_request_is_decoded_in_one_pass_straight_into_its_params() -> None:
    line = encode_request(7, "agent/run", VALID_PARAMS["agent/run"])
    got = IncomingDecoder("parent_to_child").decode(line[:-1])
    assert got == ("agent/run", 7, VALID_PARAMS["agent/run"])
    (event,) = Connection("child").receive_data(line)
    assert event == RequestReceived(7, "agent/run", VALID_PARAMS["agent/run"], len(line) - 1)


def test_a_reply_is_decoded_in_one_pass_into_the_result_type_of_its_request() -> None:
    parent = Connection("parent")
    rid, _ = parent.send_request("ping", m.Empty())
    line = encode_response(rid, {"pad": "x" * 100_000})
    assert peek_id(line) == rid
    assert parent.receive_data(line) == [ResponseReceived(rid, "ping", m.Empty())]


@given(st.binary(max_size=300))
def test_peeking_at_an_id_never_raises(line: bytes) -> None:
    peek_id(line)


def test_a_head_cut_inside_a_string_shows_no_id() -> None:
    assert peek_id(b'{"jsonrpc":"2.0","x":"a{b","id":1,"result":{}}') is UNSET
