"""Keeping the stored transcript in step with the child's (pure): each turn appends what is new,
a transcript the child rewrote is spliced where it parts, and an activation's open tool calls
are closed so a replayed transcript never ends on a call nobody answered."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.parent.agents.transcript import (
    closing_results,
    common_prefix,
    open_calls,
    turn_splice,
)
from tether.protocol.messages import ChatMessage, RunResult, ToolCall

SYSTEM = ChatMessage(role="system", content="be brief")


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def calls(*names: str) -> ChatMessage:
    return ChatMessage(
        role="assistant",
        content="",
        tool_calls=[ToolCall(id=f"c-{n}", name=n) for n in names],
    )


def result_of(call: str, text: str) -> ChatMessage:
    return ChatMessage(role="tool", content=text, tool_call_id=f"c-{call}")


def test_a_turn_on_the_stored_transcript_appends_only_what_is_new() -> None:
    stored = [user("task"), calls("list_dir")]
    request = [SYSTEM, *stored, result_of("list_dir", "a.txt")]
    splice = turn_splice(stored, request, calls("complete"))
    assert splice.keep == 2
    assert splice.add == [result_of("list_dir", "a.txt"), calls("complete")]


def test_a_rewritten_message_is_spliced_from_where_the_transcripts_part() -> None:
    # The parent closed the `complete` call with its own text; the child, continued warm, sent
    # its own result for it: the stored one is replaced from there on.
    stored = [user("task"), calls("complete"), result_of("complete", "completed"), user("more")]
    request = [SYSTEM, user("task"), calls("complete"), result_of("complete", "done, 0 files")]
    request.append(user("more"))
    splice = turn_splice(stored, request, calls("complete"))
    assert splice.keep == 2
    assert splice.add[0].content == "done, 0 files" and splice.add[-1] == calls("complete")


def test_a_reply_is_stored_as_the_child_keeps_it() -> None:
    odd = ChatMessage(role="assistant", content="x", tool_call_id="stray")
    splice = turn_splice([], [user("task")], odd)
    assert splice.add[-1] == ChatMessage(role="assistant", content="x")


def test_the_calls_of_the_last_turn_are_closed_by_how_the_activation_ended() -> None:
    transcript = [user("t"), calls("report", "ask_orchestrator")]
    asked = RunResult(success=True, status="needs_input", question="which?")
    closed = closing_results(transcript, asked)
    assert [(m.tool_call_id, m.content) for m in closed] == [
        ("c-report", "reported"),
        ("c-ask_orchestrator", "asked; the answer is the next message"),
    ]
    unknown = closing_results([*transcript, result_of("report", "reported")], None)
    assert [m.tool_call_id for m in unknown] == ["c-ask_orchestrator"]
    assert unknown[0].content.startswith("no result was recorded")
    assert closing_results([user("t")], None) == []
    assert open_calls([calls("a"), result_of("a", "ok"), user("next")]) == []


messages = st.lists(
    st.sampled_from(
        [user("a"), user("b"), calls("x"), result_of("x", "1"), result_of("x", "2"), SYSTEM]
    ),
    max_size=12,
)


@given(turns=st.lists(st.tuples(messages, st.sampled_from([calls("y"), calls("z")])), max_size=6))
def test_applying_each_turns_splice_keeps_the_store_equal_to_what_the_child_sent(
    turns: list[tuple[list[ChatMessage], ChatMessage]],
) -> None:
    stored: list[ChatMessage] = []
    for request, reply in turns:
        splice = turn_splice(stored, request, reply)
        assert splice.keep == common_prefix(stored, [m for m in request if m.role != "system"])
        stored[splice.keep :] = splice.add
        assert stored == [*(m for m in request if m.role != "system"), reply]
