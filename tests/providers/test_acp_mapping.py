"""The pure parts of the ACP driver: folding updates, permissions, stop reasons, prompts, and the
transport's framing and shape checks (over in-memory streams)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import acp
import anyio
import pytest
from acp.schema import AgentMessageChunk, PermissionOption, UsageUpdate

from tether.parent.providers.acp_mapping import (
    UpdateFolder,
    is_mutation,
    permission_answer,
    render_prompt,
    stop_outcome,
)
from tether.parent.providers.acp_transport import PipeTransport
from tether.parent.run.events import ChildEvent
from tether.protocol.messages import ChatMessage, ToolCall


def folder() -> tuple[UpdateFolder, list[ChildEvent]]:
    events: list[ChildEvent] = []
    return UpdateFolder("r", events.append), events


def chunk(text: str, message_id: str | None = None) -> AgentMessageChunk:
    return AgentMessageChunk(
        session_update="agent_message_chunk", content=acp.text_block(text), message_id=message_id
    )


def test_chunks_of_one_message_become_one_text_event_at_the_next_boundary() -> None:
    f, events = folder()
    f.fold(chunk("Hel"))
    f.fold(chunk("lo"))
    assert events == []
    f.fold(acp.start_tool_call("t", "Read", kind="read"))
    assert [(e.kind, e.data.get("text")) for e in events] == [
        ("text", "Hello"),
        ("tool_call", None),
    ]


def test_a_new_message_id_ends_the_message_before_it() -> None:
    f, events = folder()
    f.fold(chunk("one", "m1"))
    f.fold(chunk("two", "m2"))
    f.flush()
    assert [e.data["text"] for e in events] == ["one", "two"]
    assert f.summary == "two"


def test_a_paused_message_is_shown_in_parts_but_summarised_whole() -> None:
    f, events = folder()
    f.fold(chunk("The answer "), now=1.0)
    assert f.pending_since == 1.0
    f.emit_pending()
    assert f.pending_since is None
    f.fold(chunk("is 42."), now=2.0)
    f.flush()
    assert [e.data["text"] for e in events] == ["The answer ", "is 42."]
    assert f.summary == "The answer is 42."


def test_thoughts_are_marked_and_never_the_summary() -> None:
    f, events = folder()
    f.fold(chunk("Done."))
    f.fold(acp.update_agent_thought_text("secret reasoning"))
    f.flush()
    assert events[-1].data == {"text": "secret reasoning", "thought": True}
    assert f.summary == "Done."


def test_a_tool_result_is_emitted_once_when_the_call_completes() -> None:
    f, events = folder()
    f.fold(acp.start_tool_call("t", "Run tests", kind="execute", raw_input={"cmd": "make"}))
    f.fold(acp.update_tool_call("t", status="in_progress"))
    out = [acp.tool_content(acp.text_block("x" * 3000))]
    f.fold(acp.update_tool_call("t", status="failed", content=out))
    f.fold(acp.update_tool_call("t", status="failed"))
    kinds = [e.kind for e in events]
    assert kinds == ["tool_call", "tool_result"]
    result = events[1].data
    assert result["isError"] and result["truncated"] and len(result["content"]) == 2000
    assert events[0].data["arguments"] == {"cmd": "make"}
    seen = f.tool("t")
    assert seen is not None and seen.kind == "execute" and seen.status == "failed"


def test_usage_claims_and_other_updates_are_ignored() -> None:
    f, events = folder()
    f.fold(UsageUpdate(session_update="usage_update", used=10**9, size=10**9))
    assert events == [] and f.ignored == 1


def test_a_plan_becomes_a_step_event() -> None:
    f, events = folder()
    f.fold(acp.update_plan([acp.plan_entry("write tests", status="in_progress")]))
    assert events[0].kind == "step"
    assert events[0].data["plan"] == [
        {"content": "write tests", "priority": "medium", "status": "in_progress"}
    ]


@pytest.mark.parametrize(
    ("kind", "mutates"),
    [
        ("read", False),
        ("search", False),
        ("think", False),
        ("fetch", False),
        ("edit", True),
        ("delete", True),
        ("move", True),
        ("execute", True),
        ("switch_mode", True),
        ("other", True),
        (None, True),
    ],
)
def test_only_the_read_only_tool_kinds_are_not_mutations(kind: str | None, mutates: bool) -> None:
    assert is_mutation(kind) is mutates


def _options(*kinds: str) -> list[PermissionOption]:
    return [PermissionOption(option_id=f"o-{k}", name=k, kind=k) for k in kinds]  # type: ignore[arg-type]


def _chosen(answer: Any) -> str:
    outcome = answer.outcome
    return getattr(outcome, "option_id", None) or outcome.outcome


def test_permission_answers_prefer_the_once_options() -> None:
    every = _options("allow_always", "allow_once", "reject_always", "reject_once")
    assert _chosen(permission_answer(every, allow=True)) == "o-allow_once"
    assert _chosen(permission_answer(every, allow=False)) == "o-reject_once"
    assert _chosen(permission_answer(_options("allow_always"), allow=True)) == "o-allow_always"
    assert _chosen(permission_answer(_options("reject_always"), allow=False)) == "o-reject_always"


def test_a_decision_no_option_expresses_answers_cancelled() -> None:
    assert _chosen(permission_answer(_options("allow_once"), allow=False)) == "cancelled"
    assert _chosen(permission_answer([], allow=True)) == "cancelled"


@pytest.mark.parametrize(
    ("reason", "cancelled", "status", "by_cancel"),
    [
        ("end_turn", False, "completed", False),
        ("cancelled", True, "aborted", True),
        ("cancelled", False, "aborted", False),
        ("refusal", False, "error", False),
        ("max_tokens", False, "error", False),
        ("max_turn_requests", False, "error", False),
        ("something_new", False, "error", False),
    ],
)
def test_stop_reasons_map_to_a_status(
    reason: str, cancelled: bool, status: str, by_cancel: bool
) -> None:
    got = stop_outcome(reason, cancel_requested=cancelled)
    assert got.status == status and got.by_cancel is by_cancel
    assert (got.error is None) == (status == "completed")
    if status == "error":
        assert reason in (got.error or "")


def test_a_prompt_without_history_is_the_task_alone() -> None:
    (block,) = render_prompt("Fix the bug")
    assert block.text == "Fix the bug"


def test_history_goes_in_a_block_ahead_of_the_task() -> None:
    history = [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(
            role="assistant",
            content="Reading.",
            tool_calls=[ToolCall(id="c1", name="read_file", arguments={"path": "a"})],
        ),
        ChatMessage(role="tool", content="file a", tool_call_id="c1"),
    ]
    first, task = render_prompt("Go on", history)
    assert task.text == "Go on"
    assert "[system]\nbe brief" in first.text
    assert "(called read_file c1: {'path': 'a'})" in first.text
    assert "[tool result for c1]\nfile a" in first.text


# --- the transport --------------------------------------------------------------------------


@asynccontextmanager
async def _transport_reading(data: bytes, cap: int = 1024) -> AsyncIterator[PipeTransport]:
    send, receive = anyio.create_memory_object_stream[bytes](10)
    out_send, out_receive = anyio.create_memory_object_stream[bytes](10)
    with send, receive, out_send, out_receive:
        await send.send(data)
        send.close()
        yield PipeTransport(out_send, _StreamOf(receive), max_line_bytes=cap)


class _StreamOf:
    """A memory object stream as the byte stream the transport reads."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return bytes(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b"hello\n", "not JSON"),
        (b"[1, 2]\n", "not an object"),
        (b'{"id": 1, "result": {}}\n', '"jsonrpc": "2.0"'),
        (b'{"jsonrpc": "2.0", "id": [1], "result": {}}\n', "neither a number nor a string"),
        (b'{"jsonrpc": "2.0", "id": true, "result": {}}\n', "boolean"),
        (b'{"jsonrpc": "2.0", "method": 5}\n', "method is not a string"),
        (b'{"jsonrpc": "2.0"}\n', "neither a request"),
        (b'{"jsonrpc": "2.0", "method": "x", "params": 3}\n', "params"),
        (b"Content-Length: 12\r\n\r\n{}\n", "Content-Length"),
    ],
)
async def test_a_malformed_message_is_a_protocol_fault_and_the_end_of_the_stream(
    line: bytes, words: str
) -> None:
    async with _transport_reading(line) as transport:
        assert await transport.receive() is None
    assert transport.fault is not None and transport.fault.kind == "protocol"
    assert words in transport.fault.message


@pytest.mark.anyio
async def test_a_line_over_the_cap_is_an_oversize_fault_even_without_a_newline() -> None:
    async with _transport_reading(b"x" * 5000, cap=1024) as transport:
        assert await transport.receive() is None
    assert transport.fault is not None and transport.fault.kind == "oversize"


@pytest.mark.anyio
async def test_a_good_message_is_delivered_and_a_cut_tail_marks_the_output_truncated() -> None:
    async with _transport_reading(b'{"jsonrpc": "2.0", "method": "x"}\n{"jsonrpc"') as transport:
        assert await transport.receive() == {"jsonrpc": "2.0", "method": "x"}
        assert await transport.receive() is None
    assert transport.fault is None and transport.eof and transport.truncated
