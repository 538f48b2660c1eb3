"""Continuable agents in one supervisor: a warm follow-up in the same child, the keep-alive that
ends it, a cold resume from the stored transcript, and every answer stored before it is handed
back. Real child processes where a test watches the process; in memory (the in-memory tier)
where it is about the agent."""

from __future__ import annotations

from pathlib import Path

import anyio
import psutil
import pytest
from agent_models import Commanded, users

from tether.parent import Supervisor
from tether.parent.agents.sessions import SessionStore
from tether.parent.process.config import ChildConfig
from tether.protocol.messages import Usage

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_follow_up_goes_warm_to_the_same_child_with_its_history(
    state: Path, workspace: Path
) -> None:
    model = Commanded()
    async with Supervisor(state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "find the TODOs", agent="explorer", workspace=workspace, model=model, keep_alive=30
        )
        first = await agent.result()
        pid = agent.run.pid
        assert first.success and first.summary == "seen: find the TODOs"
        assert alive(pid) and sup.agents.is_warm(agent.id)

        second = await sup.send_message(agent.id, "and the FIXMEs?")
        assert second.success and second.summary == "seen: find the TODOs | and the FIXMEs?"
        assert second.run_id == first.run_id and alive(pid)  # the same child, the same run

        [summary] = await sup.list_agents()
        assert (summary.id, summary.status, summary.activations) == (agent.id, "idle", 1)
        assert summary.usage == Usage(input_tokens=20, output_tokens=10)
        assert summary.holder is not None and summary.holder.state == "alive"
        assert summary.last_summary == second.summary
    assert not alive(pid)
    async with SessionStore(state) as store:
        detail = await store.show(agent.id)
    assert detail is not None
    assert detail.summary.holder is None and detail.summary.status == "idle"
    roles = [m.role for m in detail.transcript]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assert users(detail.transcript) == ["find the TODOs", "and the FIXMEs?"]


async def test_after_its_keep_alive_the_child_is_disposed_and_a_message_resumes_cold(
    state: Path, workspace: Path
) -> None:
    model = Commanded()
    async with Supervisor(state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "first", agent="explorer", workspace=workspace, model=model, keep_alive=0.3
        )
        first = await agent.result()
        pid = agent.run.pid
        await agent.run.wait()  # the keep-alive passed: the child went down the ladder
        assert not alive(pid) and not sup.agents.is_warm(agent.id)
        with anyio.fail_after(10):
            while (await sup.list_agents())[0].holder is not None:
                await anyio.sleep(0.02)  # and the lease is released right after
        [idle] = await sup.list_agents()
        assert idle.status == "idle" and idle.question is None

        second = await sup.send_message(agent.id, "second")
        assert second.success and second.summary == "seen: first | second"
        assert second.run_id != first.run_id
        cold = model.requests[-1]
        # The fresh child got the stored transcript as its history, then the message.
        assert [m.role for m in cold.messages[1:]] == ["user", "assistant", "tool", "user"]
        assert cold.messages[2].tool_calls[0].name == "complete"
        [summary] = await sup.list_agents()
        assert summary.activations == 2 and summary.usage == Usage(
            input_tokens=20, output_tokens=10
        )
        assert summary.id == agent.id


async def test_a_child_that_died_while_idle_is_resumed_cold(state: Path, workspace: Path) -> None:
    model = Commanded()
    async with Supervisor(state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "first", agent="explorer", workspace=workspace, model=model, keep_alive=60
        )
        await agent.result()
        assert agent.run.pid is not None
        psutil.Process(agent.run.pid).kill()
        await agent.run.wait()
        second = await sup.send_message(agent.id, "still there?")
        assert second.success and second.summary == "seen: first | still there?"
        assert sup.agents.is_warm(agent.id)


@pytest.mark.in_memory
async def test_keep_alive_zero_disposes_the_child_after_each_answer(
    state: Path, workspace: Path
) -> None:
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "one", agent="explorer", workspace=workspace, model=Commanded(), keep_alive=0
        )
        await agent.result()
        await agent.run.wait()
        assert not sup.agents.is_warm(agent.id)
        again = await sup.send_message(agent.id, "two")
        assert again.summary == "seen: one | two"


@pytest.mark.in_memory
async def test_messages_to_one_agent_are_serialized_and_to_two_agents_run_in_parallel(
    state: Path, workspace: Path
) -> None:
    model = Commanded()
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        a = await sup.spawn_agent("a", agent="explorer", workspace=workspace, model=model)
        b = await sup.spawn_agent("b", agent="explorer", workspace=workspace, model=model)
        await a.result()
        await b.result()
        got: dict[str, str] = {}

        async def send(agent_id: str, text: str) -> None:
            got[text] = (await sup.send_message(agent_id, f"{text} SLEEP 0.5")).summary

        model.most_in_flight = 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, a.id, "a1")
            await anyio.sleep(0.05)
            tg.start_soon(send, a.id, "a2")
        assert model.most_in_flight == 1  # one after another, in arrival order
        assert got["a2"] == "seen: a | a1 SLEEP 0.5 | a2 SLEEP 0.5"

        model.most_in_flight = 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, a.id, "a3")
            tg.start_soon(send, b.id, "b1")
        assert model.most_in_flight == 2  # side by side


@pytest.mark.in_memory
async def test_a_sub_agent_asks_its_orchestrator_and_the_answer_resumes_it_warm_or_cold(
    state: Path, workspace: Path
) -> None:
    reports: list[str] = []

    def on_event(ev: object) -> None:
        from tether.parent import ChildEvent

        if isinstance(ev, ChildEvent) and ev.kind == "report":
            reports.append(ev.data["text"])

    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        for keep_alive in (30.0, 0.0):
            agent = await sup.spawn_agent(
                "sort the notes REPORT found 3 notes ASK which order?",
                agent="explorer",
                workspace=workspace,
                model=Commanded(),
                keep_alive=keep_alive,
                on_event=on_event,
            )
            asked = await agent.result()
            assert asked.success and asked.status == "needs_input"
            assert asked.question == "which order?"
            [parked] = await sup.list_agents(status="needs_input")
            assert parked.id == agent.id and parked.question == "which order?"
            detail = await sup.agents.show(agent.id)
            assert detail is not None and [r.text for r in detail.reports] == ["found 3 notes"]
            # The parked transcript ends with a result for every call of its last turn.
            assert [m.role for m in detail.transcript][-3:] == ["assistant", "tool", "tool"]

            answered = await sup.send_message(agent.id, "oldest first")
            assert answered.status == "completed"
            assert answered.summary.endswith("| oldest first")
            if keep_alive:
                assert sup.agents.is_warm(agent.id)
            done = {a.id: a for a in await sup.list_agents(status="idle")}[agent.id]
            assert done.question is None
            await sup.agents.dispose(agent.id)
    assert reports == ["found 3 notes", "found 3 notes"]


@pytest.mark.in_memory
async def test_a_total_token_budget_caps_each_activation_and_refuses_a_spent_agent(
    state: Path, workspace: Path
) -> None:
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "one", agent="explorer", workspace=workspace, model=Commanded(), token_total=40
        )
        assert (await agent.result()).success  # 15 tokens
        cut = await sup.send_message(agent.id, "STEPS 5")  # the budget runs out mid-way
        assert not cut.success and cut.failure is not None
        assert cut.failure.kind == "budget_exhausted"
        [summary] = await sup.list_agents()
        used = summary.usage.input_tokens + summary.usage.output_tokens
        assert 40 <= used <= 40 + 15 and summary.status == "failed"
        refused = await sup.send_message(agent.id, "more")
        assert refused.failure is not None and refused.failure.kind == "budget_exhausted"
        assert "total budget of 40" in refused.message
        [after] = await sup.list_agents()
        assert after.usage == summary.usage  # nothing ran


@pytest.mark.in_memory
async def test_each_activation_has_its_own_wall_clock(state: Path, workspace: Path) -> None:
    from tether.parent import Limits

    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "quick",
            agent="explorer",
            workspace=workspace,
            model=Commanded(),
            # In memory: no spawn to make room for; the idle limit is the least that leaves a
            # slow tool call room (`checks.warn_idle`).
            limits=Limits(wall=2.5, idle=4),
            keep_alive=30,
        )
        assert (await agent.result()).success
        await anyio.sleep(4.2)  # idling between activations is neither clock's business
        assert sup.agents.is_warm(agent.id)
        slow = await sup.send_message(agent.id, "SLEEP 10")
        assert slow.failure is not None and slow.failure.kind == "timeout"
        assert not sup.agents.is_warm(agent.id)  # cut mid-work: the child was disposed
        [failed] = await sup.list_agents()
        assert failed.status == "failed"
        resumed = await sup.send_message(agent.id, "quick again")
        assert resumed.success and resumed.summary == "seen: quick | SLEEP 10 | quick again"


@pytest.mark.in_memory
async def test_ids_that_are_garbled_or_unknown_are_refused_before_anything_runs(
    state: Path,
) -> None:
    from tether.parent.agents.service import AgentUnavailable
    from tether.parent.agents.sessions import BadAgentId

    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        with pytest.raises(BadAgentId, match="not an agent id"):
            await sup.send_message("ag_nope; DROP TABLE agents", "hi")
        with pytest.raises(AgentUnavailable, match="no agent ag_0000"):
            await sup.send_message("ag_" + "0" * 20, "hi")


async def test_a_lease_taken_over_elsewhere_disposes_of_the_warm_child_at_once(
    state: Path, workspace: Path
) -> None:
    import sqlite3

    from tether.parent.agents.service import AgentBusy
    from tether.parent.agents.sessions import DB_NAME

    async with Supervisor(state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "first", agent="explorer", workspace=workspace, model=Commanded(), keep_alive=60
        )
        await agent.result()
        pid = agent.run.pid
        # What a takeover by another process does to this one's lease (through SQLite).
        conn = sqlite3.connect(state / DB_NAME)
        with conn:
            conn.execute("UPDATE leases SET token = 'theirs' WHERE agent_id = ?", (agent.id,))
        conn.close()
        with pytest.raises(AgentBusy, match="no longer holds the lease"):
            await sup.send_message(agent.id, "more")
        with anyio.fail_after(10):
            await agent.run.wait()
        assert not alive(pid) and not sup.agents.is_warm(agent.id)
