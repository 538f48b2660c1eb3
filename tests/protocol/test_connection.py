"""The sans-I/O connection: ids, the pending table, typed events, fail-all on close."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.protocol import ErrorCode, LocalProtocolError
from tether.protocol import messages as m
from tether.protocol.codec import encode_error, encode_notification, encode_request, encode_response
from tether.protocol.connection import (
    Closed,
    Connection,
    ErrorReceived,
    MessageInvalid,
    NotificationDropped,
    NotificationReceived,
    PendingRequest,
    ReplyLate,
    ReplyUnexpected,
    RequestReceived,
    RequestRefused,
    ResponseReceived,
    ResultInvalid,
    StreamFaulted,
)
from tether.protocol.methods import AGENT_RUN, INITIALIZE, MODEL_COMPLETE, PING, SHUTDOWN

INIT = m.InitializeParams(protocol_version=1, client_info=m.PeerInfo(name="t"))


def pair() -> tuple[Connection, Connection]:
    return Connection("parent"), Connection("child")


def test_requests_get_increasing_ids_and_their_replies_come_back_typed() -> None:
    parent, child = pair()
    rid1, line1 = parent.send_request(INITIALIZE, INIT)
    rid2, line2 = parent.send_request(PING, m.Empty())
    assert (rid1, rid2) == (1, 2)
    assert parent.pending == 2
    got = child.receive_data(line1 + line2)
    assert got == [
        RequestReceived(1, "initialize", INIT, len(line1) - 1),
        RequestReceived(2, "ping", m.Empty(), len(line2) - 1),
    ]
    answer = m.InitializeResult(protocol_version=1, server_info=m.PeerInfo(name="c"), pid=7)
    events = parent.receive_data(child.send_response(2, m.Empty()) + child.send_response(1, answer))
    assert events == [
        ResponseReceived(2, "ping", m.Empty()),
        ResponseReceived(1, "initialize", answer),
    ]
    assert parent.pending == 0


def test_a_reply_split_across_reads_is_one_event() -> None:
    parent, child = pair()
    rid, _ = parent.send_request(PING, m.Empty())
    line = child.send_response(rid, m.Empty())
    assert parent.receive_data(line[:5]) == []
    assert parent.receive_data(line[5:]) == [ResponseReceived(rid, "ping", m.Empty())]


def test_an_error_reply_is_delivered_with_the_method_it_answers() -> None:
    parent, child = pair()
    rid, _ = parent.send_request(SHUTDOWN)
    [ev] = parent.receive_data(child.send_error(rid, ErrorCode.SHUTTING_DOWN, "busy"))
    assert isinstance(ev, ErrorReceived)
    assert (ev.id, ev.method, ev.error.code, ev.error.message) == (rid, "shutdown", -32005, "busy")


def test_a_result_that_does_not_fit_its_method_is_result_invalid_not_an_exception() -> None:
    parent, _ = pair()
    rid, _ = parent.send_request(AGENT_RUN, m.AgentRunParams(run_id="r", prompt="p"))
    [ev] = parent.receive_data(encode_response(rid, {"success": "maybe"}))
    assert isinstance(ev, ResultInvalid)
    assert ev.method == "agent/run" and "malformed agent/run result" in ev.reason


def test_a_reply_to_an_abandoned_request_is_late_not_a_fault() -> None:
    parent, child = pair()
    rid, _ = parent.send_request(INITIALIZE, INIT)
    parent.abandon(rid)
    assert parent.pending == 0
    assert parent.receive_data(child.send_response(rid, m.Empty())) == [ReplyLate(rid)]
    # Only once: a second reply to the same id is unexpected.
    assert parent.receive_data(child.send_response(rid, m.Empty())) == [ReplyUnexpected(rid)]


def test_a_reply_to_an_id_never_sent_is_unexpected() -> None:
    parent, _ = pair()
    assert parent.receive_data(encode_response(99, None)) == [ReplyUnexpected(99)]
    [ev] = parent.receive_data(encode_error(None, -32700, "could not read"))
    assert isinstance(ev, ReplyUnexpected) and ev.id is None and ev.error is not None


def test_each_side_serves_only_the_requests_that_flow_towards_it() -> None:
    parent, child = pair()
    # The parent does not serve `agent/run`; the child does not serve `model/complete`.
    [ev] = parent.receive_data(encode_request(1, "agent/run", {"runId": "r", "prompt": "p"}))
    assert ev == RequestRefused(
        1, "agent/run", ErrorCode.METHOD_NOT_FOUND, "Method not found: agent/run"
    )
    [ev] = child.receive_data(encode_request(2, "model/complete", {"runId": "r", "messages": []}))
    assert isinstance(ev, RequestRefused) and ev.code == ErrorCode.METHOD_NOT_FOUND
    [ev] = child.receive_data(encode_request(3, "no/such", None))
    assert isinstance(ev, RequestRefused) and ev.method == "no/such"


def test_params_that_do_not_fit_are_refused_with_invalid_params_naming_the_field() -> None:
    _, child = pair()
    [ev] = child.receive_data(encode_request(5, "agent/run", {"runId": 3, "prompt": "p"}))
    assert isinstance(ev, RequestRefused)
    assert ev.code == ErrorCode.INVALID_PARAMS and "runId" in ev.message


def test_unknown_and_malformed_notifications_are_dropped_and_say_which() -> None:
    parent, _ = pair()
    [unknown] = parent.receive_data(encode_notification("news/flash", {"x": 1}))
    [bad] = parent.receive_data(encode_notification("agent/event", {"runId": "r", "kind": "x"}))
    [good] = parent.receive_data(
        encode_notification("agent/event", {"runId": "r", "seq": 0, "kind": "step"})
    )
    assert isinstance(unknown, NotificationDropped) and not unknown.known
    assert isinstance(bad, NotificationDropped) and bad.known
    assert good == NotificationReceived(
        "agent/event", m.AgentEventParams(run_id="r", seq=0, kind="step")
    )


def test_garbage_and_framing_faults_are_reported_for_the_pump_to_judge() -> None:
    parent, _ = pair()
    [ev] = parent.receive_data(b"this is not json\n")
    assert isinstance(ev, MessageInvalid) and ev.code == ErrorCode.PARSE_ERROR
    small = Connection("parent", max_message_bytes=16)
    [ev] = small.receive_data(b"x" * 40 + b"\n")
    assert isinstance(ev, StreamFaulted) and ev.code == ErrorCode.MESSAGE_TOO_LARGE
    assert small.closed is None  # the pump decides whether that ends the conversation


def test_end_of_stream_fails_every_pending_request_at_once() -> None:
    parent, _ = pair()
    rid1, _ = parent.send_request(INITIALIZE, INIT)
    rid2, _ = parent.send_request(MODEL_COMPLETE.name, {})
    [closed] = parent.receive_eof()
    assert closed == Closed(
        "output closed",
        (PendingRequest(rid1, "initialize"), PendingRequest(rid2, "model/complete")),
    )
    assert parent.pending == 0
    assert parent.receive_data(encode_response(rid1, None)) == []
    assert parent.receive_eof() == []  # the end is reported once, then stays
    assert parent.closed == closed


def test_a_stream_that_ends_mid_message_is_truncated() -> None:
    parent, _ = pair()
    parent.receive_data(b'{"jsonrpc": "2.0", "id": 1, "res')
    [closed] = parent.receive_eof()
    assert isinstance(closed, Closed) and closed.truncated


def test_closing_by_decision_fails_pending_and_nothing_more_is_sent() -> None:
    parent, _ = pair()
    rid, _ = parent.send_request(PING, m.Empty())
    closed = parent.close("garbage from the child")
    assert closed.pending == (PendingRequest(rid, "ping"),)
    with pytest.raises(LocalProtocolError, match="garbage from the child"):
        parent.send_request(PING, m.Empty())


def test_a_line_over_the_peers_cap_is_refused_before_any_byte_or_id_is_spent() -> None:
    parent = Connection("parent", peer_max_message_bytes=64)
    with pytest.raises(LocalProtocolError) as err:
        parent.send_request(AGENT_RUN, m.AgentRunParams(run_id="r", prompt="x" * 100))
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert parent.pending == 0
    rid, _ = parent.send_request(PING, m.Empty())
    assert rid == 1


def test_a_result_that_cannot_be_encoded_raises_an_encode_error() -> None:
    _, child = pair()
    with pytest.raises((msgspec.EncodeError, TypeError)):
        child.send_response(1, object())


def test_abandoned_ids_are_remembered_only_up_to_a_bound() -> None:
    from tether.protocol.connection import ABANDONED_KEPT

    parent, _ = pair()
    for _ in range(ABANDONED_KEPT + 10):
        rid, _ = parent.send_request(PING, m.Empty())
        parent.abandon(rid)
    assert len(parent._abandoned) == ABANDONED_KEPT
    assert parent.receive_data(encode_response(1, {})) == [ReplyUnexpected(1)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["answer", "error", "abandon", "leave"]), min_size=1, max_size=12))
def test_every_request_ends_exactly_once_whatever_happens_to_it(fates: list[str]) -> None:
    """Each request sent gets exactly one ending: a reply, a late drop, or a failure at close."""
    parent, child = pair()
    ends: dict[int, int] = {}
    sent: list[int] = []
    for fate in fates:
        rid, _ = parent.send_request(PING, m.Empty())
        sent.append(rid)
        if fate == "abandon":
            parent.abandon(rid)
            ends[rid] = ends.get(rid, 0) + 1
    wire = b""
    for rid, fate in zip(sent, fates, strict=True):
        if fate == "answer":
            wire += child.send_response(rid, m.Empty())
        elif fate in ("error", "abandon"):
            wire += child.send_error(rid, -32603, "no")
    for ev in parent.receive_data(wire) + parent.receive_eof():
        if isinstance(ev, ResponseReceived | ErrorReceived):
            ends[int(ev.id)] = ends.get(int(ev.id), 0) + 1
        elif isinstance(ev, Closed):
            for p in ev.pending:
                ends[int(p.id)] = ends.get(int(p.id), 0) + 1
        else:
            assert isinstance(ev, ReplyLate)
    assert ends == dict.fromkeys(sent, 1)
