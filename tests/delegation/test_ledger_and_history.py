"""The usage ledger (records, totals, the JSON Lines file) and fork history (completed turns
only)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tether.parent.delegation import Ledger, UsageRecord, fork_history, read_ledger
from tether.parent.delegation.history import without_tools
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


# --- calls of tools a sub-agent does not have --------------------------------------------------

MIXED = ChatMessage(
    role="assistant",
    content="Reading and delegating.",
    tool_calls=[
        ToolCall(id="t1", name="task", arguments={"prompt": "x"}),
        ToolCall(id="r2", name="read_file", arguments={"path": "a.py"}),
    ],
)
TASK_RESULT = ChatMessage(role="tool", content='{"status": "completed"}', tool_call_id="t1")
READ2_RESULT = ChatMessage(role="tool", content="a = 1", tool_call_id="r2")


def test_a_forked_task_exchange_becomes_text_and_the_other_calls_stay_calls() -> None:
    after = ChatMessage(role="assistant", content="Done.")
    got = without_tools([ASK, MIXED, TASK_RESULT, READ2_RESULT, after], {"task"})
    assert [m.role for m in got] == ["user", "assistant", "tool", "user", "assistant"]
    assistant, read_result, note = got[1], got[2], got[3]
    assert [c.id for c in assistant.tool_calls] == ["r2"]
    assert assistant.content == 'Reading and delegating.\n[called task t1: {"prompt":"x"}]'
    # The kept call's result comes right after its turn, the rewritten result after that.
    assert read_result == READ2_RESULT
    assert note.content.endswith('[task t1 result] {"status": "completed"}')
    assert got[4] == after


def test_a_transcript_without_those_tools_is_unchanged() -> None:
    transcript = [ASK, READ, READ_RESULT]
    assert without_tools(transcript, {"task"}) == transcript


calls_of = st.builds(ToolCall, id=st.sampled_from(["t1", "t2"]), name=st.just("task")) | st.builds(
    ToolCall, id=st.sampled_from(["a", "b"]), name=st.just("read_file")
)
mixed_messages = st.builds(
    ChatMessage,
    role=roles,
    content=st.text(max_size=3),
    tool_calls=st.lists(calls_of, max_size=2),
    tool_call_id=st.none() | st.sampled_from(["t1", "t2", "a", "b"]),
)


@given(st.lists(mixed_messages, max_size=12))
def test_no_call_or_result_of_a_removed_tool_is_left(transcript: list[ChatMessage]) -> None:
    got = without_tools(transcript, {"task"})
    assert all(c.name != "task" for m in got if m.role == "assistant" for c in m.tool_calls)
    # A result of an earlier task call is gone (it comes back inside a user note); every other
    # message is kept, in order.
    expected, task_calls = [], set()
    for m in transcript:
        if m.role == "assistant":
            task_calls |= {c.id for c in m.tool_calls if c.name == "task"}
        if not (m.role == "tool" and m.tool_call_id in task_calls):
            expected.append(m.role)
    notes = [m for m in got if m.content.startswith("Results of the calls")]
    assert [m.role for m in got if m not in notes] == expected
    assert all(m.role == "user" for m in notes)
