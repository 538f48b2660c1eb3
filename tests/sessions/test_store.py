"""The session store's records: agents, transcripts, usage, reports, statuses, the query API,
and the bounds it keeps what children and models send within."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.parent.agents.sessions import (
    DB_NAME,
    Activation,
    AgentSummary,
    BadAgentId,
    LeaseLost,
    SessionStore,
    StoreBounds,
    TranscriptFull,
)
from tether.parent.agents.sessions.queries import decode_message, encode_message
from tether.protocol.messages import AgentDefinition, ChatMessage, ToolCall, Usage

pytestmark = pytest.mark.anyio

EXPLORER = AgentDefinition(type="explorer", description="reads", instructions="be brief")


async def _activate(store: SessionStore, agent_id: str) -> Activation:
    activation = await store.acquire(agent_id)
    assert isinstance(activation, Activation), activation
    return activation


async def test_a_new_agent_is_idle_with_its_definition_provider_and_label(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(
            EXPLORER, provider="fork", label="find the TODOs", workspace="/w", parent_run="run-1"
        )
        assert agent.id.startswith("ag_")
        assert (agent.status, agent.agent_type, agent.provider, agent.label) == (
            "idle",
            "explorer",
            "fork",
            "find the TODOs",
        )
        assert (agent.workspace, agent.parent_run, agent.activations) == ("/w", "run-1", 0)
        assert agent.usage == Usage() and agent.message_count == 0 and agent.holder is None
        detail = await store.show(agent.id)
        assert detail is not None
        assert detail.definition == EXPLORER
        assert detail.transcript == [] and detail.reports == []


async def test_ids_are_unique_and_a_missing_agent_reads_as_none(state: Path) -> None:
    async with SessionStore(state) as store:
        ids = {(await store.create_agent(AgentDefinition())).id for _ in range(50)}
        assert len(ids) == 50
        assert await store.get("ag_" + "f" * 20) is None
        assert await store.show("ag_" + "f" * 20) is None


async def test_turns_append_in_order_and_usage_adds_up_across_activations(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(EXPLORER)
        first = await _activate(store, agent.id)
        call = ToolCall(id="c1", name="read_file", arguments={"path": "a.txt"})
        await first.append([ChatMessage(role="user", content="go")])
        n = await first.append(
            [
                ChatMessage(role="assistant", content="", tool_calls=[call]),
                ChatMessage(role="tool", content="text of a", tool_call_id="c1"),
            ],
            Usage(input_tokens=100, output_tokens=20),
        )
        assert n == 3
        await first.settle("idle", summary="read a")
        await first.release()

        second = await _activate(store, agent.id)
        await second.append(
            [
                ChatMessage(role="user", content="and b?"),
                ChatMessage(role="assistant", content="b"),
            ],
            Usage(input_tokens=150, output_tokens=5),
        )
        await second.release("idle")

        summary = await store.get(agent.id)
        assert summary is not None
        assert summary.usage == Usage(input_tokens=250, output_tokens=25)
        assert (summary.activations, summary.message_count, summary.status) == (2, 5, "idle")
        assert summary.last_summary == "read a"
        transcript = await store.transcript(agent.id)
        assert [m.role for m in transcript] == ["user", "assistant", "tool", "user", "assistant"]
        assert transcript[1].tool_calls == [call]
        assert transcript[2].tool_call_id == "c1"
        tail = await store.show(agent.id, tail=2)
        assert tail is not None
        assert [m.content for m in tail.transcript] == ["and b?", "b"]
        assert tail.transcript_offset == 3


async def test_a_compacted_transcript_replaces_the_stored_one_whole(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(EXPLORER)
        activation = await _activate(store, agent.id)
        for k in range(5):
            await activation.append([ChatMessage(role="assistant", content=f"turn {k}")])
        await activation.replace_transcript(
            [ChatMessage(role="user", content="summary of turns 0-3")],
            Usage(input_tokens=7, output_tokens=3),
        )
        await activation.append([ChatMessage(role="assistant", content="turn 5")])
        await activation.release("idle")
        transcript = await store.transcript(agent.id)
        assert [m.content for m in transcript] == ["summary of turns 0-3", "turn 5"]
        summary = await store.get(agent.id)
        assert summary is not None
        assert summary.message_count == 2
        assert summary.usage == Usage(input_tokens=7, output_tokens=3)


async def test_statuses_follow_the_activation(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(EXPLORER)
        activation = await _activate(store, agent.id)

        async def status() -> tuple[str, str | None]:
            s = await store.get(agent.id)
            assert s is not None
            return s.status, s.question

        assert await status() == ("running", None)
        await activation.settle("needs_input", summary="half done", question="which file?")
        assert await status() == ("needs_input", "which file?")
        await activation.mark_running()  # the orchestrator answered a warm child
        assert await status() == ("running", None)
        await activation.settle("failed", summary="it broke")
        await activation.release()
        assert await status() == ("failed", None)
        activation = await _activate(store, agent.id)  # a cold retry
        assert await status() == ("running", None)
        await activation.release()  # let go mid-run: nothing answered
        assert await status() == ("interrupted", None)


async def test_list_agents_filters_by_status_and_parent_run_newest_first(state: Path) -> None:
    async with SessionStore(state) as store:
        a = await store.create_agent(EXPLORER, label="a", parent_run="r1")
        b = await store.create_agent(EXPLORER, label="b", parent_run="r1")
        c = await store.create_agent(EXPLORER, label="c", parent_run="r2")
        activation = await _activate(store, b.id)
        await activation.settle("needs_input", question="?")

        def ids(rows: list[AgentSummary]) -> list[str]:
            return [r.id for r in rows]

        assert ids(await store.list_agents()) == [b.id, c.id, a.id]
        assert ids(await store.list_agents(parent_run="r1")) == [b.id, a.id]
        assert ids(await store.list_agents(status="needs_input")) == [b.id]
        assert ids(await store.list_agents(status=["idle"], parent_run="r1")) == [a.id]
        assert ids(await store.list_agents(limit=1)) == [b.id]
        assert await store.list_agents(limit=0) == []
        assert await store.list_agents(parent_run="x'; DROP TABLE agents; --") == []
        await activation.release()
        assert len(await store.list_agents()) == 3


async def test_a_running_session_whose_holder_is_gone_lists_as_interrupted(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(EXPLORER)
    # What a SIGKILLed owner leaves: the session `running`, a lease naming a dead process.
    conn = sqlite3.connect(state / DB_NAME)
    with conn:
        conn.execute("UPDATE agents SET status = 'running' WHERE id = ?", (agent.id,))
        conn.execute(
            "INSERT INTO leases VALUES (?, 't', 999999999, 1, 'b', 'n', 0, 0, 0)", (agent.id,)
        )
    conn.close()
    async with SessionStore(state) as store:
        summary = await store.get(agent.id)
        assert summary is not None
        assert (summary.status, summary.stored_status) == ("interrupted", "running")
        assert [s.id for s in await store.list_agents(status="interrupted")] == [agent.id]
        assert await store.list_agents(status="running") == []


async def test_hostile_strings_are_stored_verbatim_never_run(state: Path) -> None:
    nasty = "x'); DROP TABLE agents; --\x00\u202e\n"
    async with SessionStore(state) as store:
        agent = await store.create_agent(
            AgentDefinition(type=nasty), label=nasty, workspace=nasty, parent_run=nasty
        )
        activation = await _activate(store, agent.id)
        await activation.append([ChatMessage(role="assistant", content=nasty)])
        await activation.report(nasty)
        await activation.settle("needs_input", summary=nasty, question=nasty)
        await activation.release()
        detail = await store.show(agent.id)
        assert detail is not None
        s = detail.summary
        assert (s.label, s.workspace, s.parent_run, s.agent_type) == (nasty,) * 4
        assert (s.last_summary, s.question) == (nasty, nasty)
        assert detail.transcript[0].content == nasty and detail.reports[0].text == nasty
        assert [x.id for x in await store.list_agents(parent_run=nasty)] == [agent.id]


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "ag_",
        "AG_" + "0" * 20,
        "ag_" + "0" * 19,
        "ag_" + "0" * 21,
        "ag_" + "g" * 20,
        "' OR 1=1 --",
        "ag_00000000000000000000' OR '1'='1",
        42,
        None,
    ],
)
async def test_a_model_supplied_id_that_is_not_an_id_is_refused_before_any_query(
    state: Path, raw: object
) -> None:
    async with SessionStore(state) as store:
        await store.create_agent(EXPLORER)
        for call in (store.get, store.show, store.transcript, store.acquire, store.close_agent):
            with pytest.raises(BadAgentId) as err:
                await call(raw)  # type: ignore[operator]
            assert len(str(err.value)) < 200
        assert len(await store.list_agents()) == 1


async def test_an_id_with_surrounding_whitespace_is_accepted(state: Path) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(EXPLORER)
        found = await store.get(f"  {agent.id}\n")
        assert found is not None and found.id == agent.id


async def test_reports_past_the_bound_drop_the_oldest_and_each_is_cut(state: Path) -> None:
    bounds = StoreBounds(reports=3, report_chars=10)
    async with SessionStore(state, bounds=bounds) as store:
        agent = await store.create_agent(EXPLORER)
        activation = await _activate(store, agent.id)
        for k in range(5):
            entry = await activation.report(f"finding {k} " + "!" * 50)
            assert entry.seq == k and len(entry.text) == 10
        await activation.release()
        detail = await store.show(agent.id)
        assert detail is not None
        assert [r.seq for r in detail.reports] == [2, 3, 4]
        assert [r.text for r in detail.reports] == ["finding 2 ", "finding 3 ", "finding 4 "]
        assert detail.reports_dropped == 2


async def test_label_summary_and_question_are_cut_at_their_bounds(state: Path) -> None:
    bounds = StoreBounds(label_chars=5, summary_chars=6, question_chars=7)
    async with SessionStore(state, bounds=bounds) as store:
        agent = await store.create_agent(EXPLORER, label="x" * 100)
        activation = await _activate(store, agent.id)
        await activation.settle("needs_input", summary="s" * 100, question="q" * 100)
        await activation.release()
        s = await store.get(agent.id)
        assert s is not None
        assert (s.label, s.last_summary, s.question) == ("x" * 5, "s" * 6, "q" * 7)


async def test_a_turn_past_the_transcript_bound_is_refused_whole(state: Path) -> None:
    bounds = StoreBounds(transcript_bytes=2000)
    async with SessionStore(state, bounds=bounds) as store:
        agent = await store.create_agent(EXPLORER)
        activation = await _activate(store, agent.id)
        await activation.append(
            [ChatMessage(role="user", content="a" * 900)], Usage(input_tokens=1, output_tokens=1)
        )
        with pytest.raises(TranscriptFull, match="nothing of the turn was stored"):
            await activation.append(
                [
                    ChatMessage(role="assistant", content="b" * 500),
                    ChatMessage(role="tool", content="c" * 700, tool_call_id="x"),
                ],
                Usage(input_tokens=100, output_tokens=100),
            )
        await activation.release()
        s = await store.get(agent.id)
        assert s is not None
        assert (s.message_count, s.usage) == (1, Usage(input_tokens=1, output_tokens=1))
        assert [m.content for m in await store.transcript(agent.id)] == ["a" * 900]


async def test_an_oversized_message_is_stored_cut_with_a_note(state: Path) -> None:
    bounds = StoreBounds(message_bytes=4096)
    async with SessionStore(state, bounds=bounds) as store:
        agent = await store.create_agent(EXPLORER)
        activation = await _activate(store, agent.id)
        call = ToolCall(id="c9", name="write_file", arguments={"content": "z" * 10_000})
        await activation.append(
            [
                ChatMessage(role="tool", content="y" * 100_000, tool_call_id="c8"),
                ChatMessage(role="assistant", content="thinking", tool_calls=[call]),
            ]
        )
        await activation.release()
        tool, assistant = await store.transcript(agent.id)
        assert tool.tool_call_id == "c8" and tool.content.startswith("y" * 1000)
        assert "cut to keep this message within" in tool.content
        assert len(msgspec.json.encode(tool)) <= 4096
        # Tool calls keep their ids and names (the transcript stays well-formed).
        assert [(c.id, c.name) for c in assistant.tool_calls] == [("c9", "write_file")]
        assert assistant.tool_calls[0].arguments == {"cut_by_tether": True}


_text = st.text(st.characters(codec="utf-8"), max_size=3000)
_messages = st.builds(
    ChatMessage,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=_text,
    tool_calls=st.lists(
        st.builds(
            ToolCall,
            id=st.text(max_size=30),
            name=st.text(max_size=30),
            arguments=st.dictionaries(st.text(max_size=10), _text, max_size=3),
        ),
        max_size=3,
    ),
    tool_call_id=st.none() | st.text(max_size=30),
)


@settings(max_examples=200, deadline=None)
@given(message=_messages, limit=st.integers(1024, 8192))
def test_a_stored_message_is_within_its_bound_and_keeps_its_shape(
    message: ChatMessage, limit: int
) -> None:
    try:
        body = encode_message(message, limit)
    except TranscriptFull:
        # Only when the tool calls' ids and names alone cannot fit.
        bare = msgspec.structs.replace(
            message,
            content="",
            tool_calls=[ToolCall(id=c.id, name=c.name) for c in message.tool_calls],
        )
        assert len(msgspec.json.encode(bare)) > limit - 300
        return
    assert len(body) <= limit
    stored = decode_message(body)
    assert stored.role == message.role and stored.tool_call_id == message.tool_call_id
    assert [(c.id, c.name) for c in stored.tool_calls] == [
        (c.id, c.name) for c in message.tool_calls
    ]
    if stored != message:
        assert "tether: cut" in stored.content
        kept = stored.content[: stored.content.index("\n[tether: cut")]
        assert message.content.startswith(kept)


def test_the_store_refuses_use_outside_its_context(state: Path) -> None:
    from tether.parent.agents.sessions import StoreUnavailable

    store = SessionStore(state)

    async def use() -> None:
        await store.list_agents()

    with pytest.raises(StoreUnavailable, match="not open"):
        anyio.run(use)


async def test_a_splice_keeps_a_prefix_replaces_the_rest_and_counts_bytes_and_usage(
    state: Path,
) -> None:
    messages = [ChatMessage(role="user", content=f"m{i}") for i in range(5)]
    async with SessionStore(state) as store:
        agent = await store.create_agent(EXPLORER)
        activation = await _activate(store, agent.id)
        await activation.append(messages, Usage(input_tokens=1))
        new = [ChatMessage(role="tool", content="theirs", tool_call_id="c1")]
        assert await activation.splice(3, new, Usage(output_tokens=2)) == 4
        assert [m.content for m in await store.transcript(agent.id)] == ["m0", "m1", "m2", "theirs"]
        # Splices keep working on a spliced transcript (sequence numbers are never reused).
        assert await activation.splice(1, [messages[4]]) == 2
        assert await activation.splice(99, [messages[0]]) == 3  # past the end: an append
        got = await store.get(agent.id)
        assert got is not None
        assert [m.content for m in await store.transcript(agent.id)] == ["m0", "m4", "m0"]
        assert got.message_count == 3 and got.usage == Usage(input_tokens=1, output_tokens=2)
        expected = sum(len(encode_message(m, 1 << 20)) for m in await store.transcript(agent.id))
        assert got.transcript_bytes == expected
        detail = await store.show(agent.id, tail=2)
        assert detail is not None and detail.transcript_offset == 1


async def test_a_splice_past_the_transcript_bound_stores_nothing(state: Path) -> None:
    bounds = StoreBounds(transcript_bytes=4096, message_bytes=2048)
    async with SessionStore(state, bounds=bounds) as store:
        agent = await store.create_agent(EXPLORER)
        activation = await _activate(store, agent.id)
        await activation.append([ChatMessage(role="user", content="x" * 1500)] * 2)
        with pytest.raises(TranscriptFull):
            await activation.splice(1, [ChatMessage(role="user", content="y" * 1500)] * 2)
        assert len(await store.transcript(agent.id)) == 2
        # Replacing a big message with a small one fits.
        await activation.splice(1, [ChatMessage(role="user", content="small")])
        assert [len(m.content) for m in await store.transcript(agent.id)] == [1500, 5]


async def test_spawn_settings_are_stored_with_the_agent_and_read_back(state: Path) -> None:
    from tether.parent.agents.sessions import SpawnSettings

    settings = SpawnSettings(
        model="scripted:/tmp/x.json",
        limits={"wall": 30.0, "processes": 64},
        keep_alive=5.0,
        token_total=1000,
        missing=["env"],
    )
    async with SessionStore(state) as store:
        agent = await store.create_agent(EXPLORER, spawn=settings)
        plain = await store.create_agent(EXPLORER)
        assert await store.spawn_settings(agent.id) == settings
        assert await store.spawn_settings(plain.id) is None
        got = await store.spawn_settings(agent.id)
        assert got is not None and isinstance(got.limits["processes"], int)


async def test_settle_and_mark_running_store_their_messages_in_the_same_transaction(
    state: Path,
) -> None:
    async with SessionStore(state) as store:
        agent = await store.create_agent(EXPLORER)
        activation = await _activate(store, agent.id)
        closing = ChatMessage(role="tool", content="asked", tool_call_id="c1")
        await activation.settle(
            "needs_input",
            summary="s",
            question="which?",
            messages=[closing],
            usage=Usage(input_tokens=4),
        )
        got = await store.get(agent.id)
        assert got is not None and (got.status, got.question) == ("needs_input", "which?")
        assert got.usage == Usage(input_tokens=4)
        answer = ChatMessage(role="user", content="this one")
        await activation.mark_running([answer])
        got = await store.get(agent.id)
        assert got is not None and (got.status, got.question) == ("running", None)
        assert await store.transcript(agent.id) == [closing, answer]
        # Taken over: the token check fails inside the transaction, so its messages are not
        # stored either.
        conn = sqlite3.connect(state / DB_NAME)
        with conn:
            conn.execute("UPDATE leases SET token = 'theirs' WHERE agent_id = ?", (agent.id,))
        conn.close()
        with pytest.raises(LeaseLost):
            await activation.mark_running([answer])
        with pytest.raises(LeaseLost):
            await activation.settle("idle", messages=[closing])
        assert len(await store.transcript(agent.id)) == 2
