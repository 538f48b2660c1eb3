"""The usage ledger (records, totals, the JSON Lines file) and fork history (completed turns
only)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tether.parent.delegation import Ledger, UsageRecord, fork_history, read_ledger
from tether.parent.delegation.ledger import OrchestratorUsage
from tether.protocol.messages import ChatMessage, ToolCall, Usage


def record(n: int, usage: Usage) -> UsageRecord:
    return UsageRecord(
        subagent_id=f"sa-{n}",
        definition="explorer",
        provider="spawn",
        model=None,
        role="task",
        tool_call_id=f"call-{n}",
        label="look around",
        run_id=f"run-{n}",
        read_only=True,
        steps=3,
        usage=usage,
        status="completed",
        started_at="2026-01-01T00:00:00.000Z",
        completed_at="2026-01-01T00:00:01.000Z",
    )


def test_the_ledger_totals_subagents_and_the_orchestrator_beside_them(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path, fsync=True)
    ledger.append(record(1, Usage(input_tokens=100, output_tokens=10)))
    ledger.append(record(2, Usage(input_tokens=50, output_tokens=5)))
    ledger.add_orchestrator_usage(Usage(input_tokens=7, output_tokens=3))
    totals = ledger.totals()
    assert totals.runs == 2
    assert totals.subagents == Usage(input_tokens=150, output_tokens=15)
    assert totals.orchestrator == Usage(input_tokens=7, output_tokens=3)
    assert totals.total == Usage(input_tokens=157, output_tokens=18)
    entries = read_ledger(path)
    assert entries[:2] == ledger.records
    assert isinstance(entries[2], OrchestratorUsage) and entries[2].usage.input_tokens == 7
    first = path.read_text().splitlines()[0]
    assert first.startswith('{"record":"subagent","subagentId":"sa-1"')
    assert '"toolCallId":"call-1"' in first and '"startedAt"' in first


def test_a_ledger_file_that_cannot_be_written_keeps_the_record_in_memory(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "missing-dir" / "ledger.jsonl")
    ledger.append(record(1, Usage(input_tokens=1)))
    assert ledger.write_errors == 1 and len(ledger.records) == 1


def test_listeners_see_each_record_as_it_is_appended() -> None:
    ledger = Ledger()
    seen: list[str] = []
    unsubscribe = ledger.subscribe(lambda r: seen.append(r.subagent_id))
    ledger.append(record(1, Usage()))
    unsubscribe()
    ledger.append(record(2, Usage()))
    assert seen == ["sa-1"] and len(ledger.for_call("call-2")) == 1


# --- fork history -----------------------------------------------------------------------------

SYSTEM = ChatMessage(role="system", content="You are an orchestrator.")
ASK = ChatMessage(role="user", content="Fix the parser.")
READ = ChatMessage(
    role="assistant", content="Reading.", tool_calls=[ToolCall(id="r1", name="read_file")]
)
READ_RESULT = ChatMessage(role="tool", content="def parse(): ...", tool_call_id="r1")
DELEGATE = ChatMessage(
    role="assistant",
    content="Delegating.",
    tool_calls=[
        ToolCall(id="t1", name="task", arguments={"prompt": "x"}),
        ToolCall(id="t2", name="task", arguments={"prompt": "y"}),
    ],
)


def test_fork_history_is_the_completed_turns_without_system_messages() -> None:
    transcript = [SYSTEM, ASK, READ, READ_RESULT, DELEGATE]
    assert fork_history(transcript, "t1") == [ASK, READ, READ_RESULT]
    assert fork_history(transcript, "t2") == [ASK, READ, READ_RESULT]


def test_fork_history_cuts_at_the_first_turn_with_an_unanswered_call() -> None:
    pending = ChatMessage(role="assistant", tool_calls=[ToolCall(id="p", name="bash")])
    later = ChatMessage(role="user", content="more")
    assert fork_history([ASK, pending, later, DELEGATE], "t1") == [ASK]
    assert fork_history([SYSTEM, ASK, READ, READ_RESULT]) == [ASK, READ, READ_RESULT]


def test_fork_history_of_an_empty_transcript_is_empty() -> None:
    assert fork_history([], "t1") == []
    assert fork_history([SYSTEM], "t1") == []


roles = st.sampled_from(["system", "user", "assistant", "tool"])
call_ids = st.sampled_from(["a", "b", "c", "t1"])
messages = st.builds(
    ChatMessage,
    role=roles,
    content=st.text(max_size=3),
    tool_calls=st.lists(st.builds(ToolCall, id=call_ids, name=st.just("x")), max_size=2),
    tool_call_id=st.none() | call_ids,
)


@given(st.lists(messages, max_size=12), st.none() | call_ids)
def test_fork_history_is_a_prefix_without_system_messages_and_no_unanswered_call(
    transcript: list[ChatMessage], call_id: str | None
) -> None:
    got = fork_history(transcript, call_id)
    assert got == [m for m in transcript if m.role != "system"][: len(got)]
    for i, m in enumerate(got):
        if m.role == "assistant":
            answered = {r.tool_call_id for r in got[i + 1 :] if r.role == "tool"}
            assert all(c.id in answered for c in m.tool_calls)
            assert call_id is None or all(c.id != call_id for c in m.tool_calls)
