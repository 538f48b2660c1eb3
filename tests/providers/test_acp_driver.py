"""The ACP driver against a real ACP agent process (tests/children/acp_agent.py), written with
the same `agent-client-protocol` package: a scripted prompt per test."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from agent_process import ACP_AGENT, spawned

from tether.parent.providers.acp import AcpDriver, AcpLimits, AcpOutcome, AcpTask
from tether.parent.run.events import ChildEvent
from tether.protocol.messages import ChatMessage, ToolApproveParams, ToolApproveResult, Usage

pytestmark = pytest.mark.anyio


class FakeMeter:
    """Stands in for the gateway's grant: what the parent metered for this agent."""

    def __init__(self, usage: Usage, calls: int) -> None:
        self.usage = usage
        self.calls = calls
        self.in_flight = 0
        self.last_active = 0.0
        self.exhausted = False


async def drive(
    workspace: Path,
    steps: list[dict[str, Any]],
    *,
    argv: list[str] | None = None,
    read_only: bool = False,
    approve: Callable[[ToolApproveParams], Awaitable[ToolApproveResult] | ToolApproveResult]
    | None = None,
    limits: AcpLimits | None = None,
    history: list[ChatMessage] | None = None,
    meter: FakeMeter | None = None,
    cancel_when: Callable[[ChildEvent], bool] | None = None,
) -> tuple[AcpOutcome, list[ChildEvent], str]:
    events: list[ChildEvent] = []
    async with spawned([*ACP_AGENT, *(argv or [])]) as agent:
        assert agent.process.stdin is not None and agent.process.stdout is not None
        driver: AcpDriver

        def on_event(event: ChildEvent) -> None:
            events.append(event)
            if cancel_when is not None and cancel_when(event):
                driver.cancel()

        driver = AcpDriver(
            agent.process.stdin,
            agent.process.stdout,
            AcpTask(
                "run-1",
                json.dumps(steps),
                workspace,
                read_only=read_only,
                history=history or [],
            ),
            approve=approve,
            on_event=on_event,
            meter=meter,
            limits=limits or AcpLimits(wall=30),
        )
        outcome = await driver.run()
    return outcome, events, agent.stderr.decode(errors="replace")


def texts(events: list[ChildEvent]) -> list[str]:
    return [e.data["text"] for e in events if e.kind == "text" and not e.data.get("thought")]


async def test_a_scripted_agent_completes_with_its_last_message_as_the_summary(
    tmp_path: Path,
) -> None:
    steps = [
        {"say": "Looking around."},
        {"think": "what to do"},
        {"plan": ["read", "answer"]},
        {"tool": {"id": "t1", "title": "Read notes", "kind": "read", "input": {"path": "n"}}},
        {"update": {"id": "t1", "status": "completed", "output": "notes here"}},
        {"usage_claim": 999_999},
        {"say": "The answer is 42."},
    ]
    outcome, events, _ = await drive(tmp_path, steps, meter=FakeMeter(Usage(120, 30), 2))
    result = outcome.result()
    assert result.success and result.status == "completed", result
    assert result.summary == "The answer is 42."
    assert result.usage == Usage(input_tokens=120, output_tokens=30)  # metered, not claimed
    assert result.iteration_count == 2 and result.turn_count == 1
    assert outcome.agent == {"name": "script-agent", "version": "1.0"}
    kinds = [e.kind for e in events]
    assert kinds == ["started", "text", "text", "step", "tool_call", "tool_result", "text"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[2].data == {"text": "what to do", "thought": True}
    assert events[3].data["plan"][0]["content"] == "read"
    assert events[4].data == {
        "id": "t1",
        "name": "Read notes",
        "kind": "read",
        "arguments": {"path": "n"},
    }
    assert events[5].data["content"] == "notes here" and not events[5].data["isError"]


async def test_cancel_mid_prompt_sends_session_cancel_and_the_run_ends_aborted(
    tmp_path: Path,
) -> None:
    steps = [{"say": "waiting"}, {"wait": 30}, {"say": "never"}]
    started = time.monotonic()
    outcome, events, _ = await drive(
        tmp_path, steps, cancel_when=lambda e: e.data.get("text") == "waiting"
    )
    result = outcome.result()
    assert time.monotonic() - started < 10
    assert result.status == "aborted" and not result.success
    assert result.failure is not None and result.failure.kind == "cancelled"
    assert outcome.answer is not None  # the agent itself ended the turn `cancelled`
    assert "never" not in texts(events)


async def test_an_agent_that_ignores_cancel_is_cut_after_the_grace(tmp_path: Path) -> None:
    steps = [{"say": "busy"}, {"hang": 60}]
    started = time.monotonic()
    outcome, _, _ = await drive(
        tmp_path,
        steps,
        limits=AcpLimits(wall=30, cancel_grace=0.5),
        cancel_when=lambda e: e.data.get("text") == "busy",
    )
    result = outcome.result()
    assert time.monotonic() - started < 10
    assert outcome.answer is None and outcome.observed.cancelled
    assert result.status == "aborted" and result.failure is not None
    assert result.failure.kind == "cancelled"


async def test_a_pending_permission_request_is_answered_cancelled_on_cancel(
    tmp_path: Path,
) -> None:
    asked = anyio.Event()

    async def never_decides(params: ToolApproveParams) -> ToolApproveResult:
        asked.set()
        await anyio.sleep(3600)
        raise AssertionError("unreachable")

    steps = [{"tool": {"id": "t1", "title": "Edit", "kind": "edit"}}, {"ask": {"id": "t1"}}]
    outcome, events, _ = await drive(
        tmp_path,
        steps,
        approve=never_decides,
        cancel_when=lambda e: e.kind == "tool_call",
    )
    assert "permission t1: cancelled" in texts(events)
    result = outcome.result()
    assert result.status == "aborted" and result.failure is not None
    assert result.failure.kind == "cancelled"


async def test_explore_mode_refuses_a_mutating_permission_without_asking_the_policy(
    tmp_path: Path,
) -> None:
    asked: list[ToolApproveParams] = []

    def policy(params: ToolApproveParams) -> ToolApproveResult:
        asked.append(params)
        return ToolApproveResult(allow=True)

    steps = [
        {"tool": {"id": "e1", "title": "Edit main.py", "kind": "edit"}},
        {"ask": {"id": "e1"}},
        {"ask": {"id": "x1", "title": "Run make", "kind": "execute"}},
        {"ask": {"id": "u1", "title": "Something"}},  # no kind: counted as a mutation
        {"ask": {"id": "r1", "title": "Read a file", "kind": "read"}},
    ]
    outcome, events, _ = await drive(tmp_path, steps, read_only=True, approve=policy)
    said = texts(events)
    assert "permission e1: no" in said
    assert "permission x1: no" in said
    assert "permission u1: no" in said
    assert "permission r1: yes" in said
    assert [p.arguments["toolCallId"] for p in asked] == ["r1"]
    assert asked[0].tool == "read" and asked[0].run_id == "run-1"
    assert len(outcome.refusals) == 3


async def test_in_build_mode_the_policy_decides_and_allow_is_for_this_call_only(
    tmp_path: Path,
) -> None:
    async def policy(params: ToolApproveParams) -> ToolApproveResult:
        return ToolApproveResult(allow=params.arguments["title"] != "rm -rf", reason="no")

    steps = [
        {"ask": {"id": "a", "title": "make", "kind": "execute"}},
        {"ask": {"id": "b", "title": "rm -rf", "kind": "execute"}},
    ]
    _, events, _ = await drive(tmp_path, steps, approve=policy)
    said = texts(events)
    assert "permission a: yes" in said  # allow_once, never the lasting allow_always
    assert "permission b: no" in said


async def test_a_crash_mid_prompt_is_a_failed_result_not_an_exception(tmp_path: Path) -> None:
    outcome, events, _ = await drive(tmp_path, [{"say": "about to die"}, {"crash": 3}])
    result = outcome.result()
    assert not result.success and result.status == "error"
    assert result.failure is not None and result.failure.kind == "protocol"
    assert "without answering" in result.message
    assert "about to die" in texts(events)
    # The spawner adds the exit status it saw to the same record, and the crash is named.
    outcome.observed.exit_code = 3
    refined = outcome.result()
    assert refined.failure is not None and refined.failure.kind == "exit_nonzero"
    assert refined.failure.exit_code == 3


async def test_writes_outside_the_workspace_are_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside.txt"
    steps = [
        {"write": {"path": str(outside), "content": "x"}},
        {"write": {"path": f"{ws}/../outside.txt", "content": "x"}},
        {"write": {"path": "../outside.txt", "content": "x"}},
        {"write": {"path": "/proc/self/cwd/outside.txt", "content": "x"}},
        {"write": {"path": f"{ws}/sub/inside.txt", "content": "fine"}},
    ]
    outcome, events, _ = await drive(ws, steps)
    said = texts(events)
    assert sum("refused" in t for t in said) == 4, said
    assert f"wrote {ws}/sub/inside.txt" in said
    assert not outside.exists()
    assert (ws / "sub" / "inside.txt").read_text() == "fine"
    result = outcome.result()
    assert [a.path for a in result.artifacts] == [f"{ws}/sub/inside.txt"]
    assert result.artifacts[0].size == 4


async def test_a_symlink_out_of_the_workspace_is_refused_for_reads_and_writes(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "key").write_text("TOP SECRET")
    (ws / "out").symlink_to(secret_dir)
    (ws / "key-link").symlink_to(secret_dir / "key")
    (ws / "rel").symlink_to("../secret")
    (ws / "in").symlink_to(ws / "real")
    (ws / "real").mkdir()
    steps = [
        {"read": {"path": f"{ws}/out/key"}},
        {"read": {"path": f"{ws}/key-link"}},
        {"read": {"path": f"{ws}/rel/key"}},
        {"write": {"path": f"{ws}/out/new", "content": "x"}},
        {"write": {"path": f"{ws}/key-link", "content": "overwritten"}},
        {"write": {"path": f"{ws}/in/ok.txt", "content": "inside"}},
    ]
    _, events, _ = await drive(ws, steps)
    said = "\n".join(texts(events))
    assert "TOP SECRET" not in said
    assert said.count("refused") == 5, said
    assert (secret_dir / "key").read_text() == "TOP SECRET"
    assert not (secret_dir / "new").exists()
    assert (ws / "real" / "ok.txt").read_text() == "inside"


async def test_a_hard_linked_file_is_not_written(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("original")
    os.link(victim, ws / "alias")
    _, events, _ = await drive(ws, [{"write": {"path": f"{ws}/alias", "content": "changed"}}])
    assert any("hard links" in t for t in texts(events)), texts(events)
    assert victim.read_text() == "original"


async def test_explore_mode_refuses_writes_and_reads_still_work(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\n")
    steps = [
        {"write": {"path": f"{tmp_path}/new.txt", "content": "x"}},
        {"read": {"path": f"{tmp_path}/notes.txt", "line": 2, "limit": 1}},
    ]
    outcome, events, _ = await drive(tmp_path, steps, read_only=True)
    said = texts(events)
    assert any("read-only" in t for t in said), said
    assert f"read {tmp_path}/notes.txt: two\n" in said
    assert not (tmp_path / "new.txt").exists()
    assert outcome.result().success


async def test_terminal_requests_are_refused(tmp_path: Path) -> None:
    outcome, events, _ = await drive(tmp_path, [{"terminal": "touch pwned"}])
    assert any(t.startswith("terminal refused") for t in texts(events))
    assert not (tmp_path / "pwned").exists()
    assert outcome.refusals == ["terminal/create 'touch pwned'"]


async def test_a_fork_sends_the_earlier_turns_ahead_of_the_task(tmp_path: Path) -> None:
    history = [
        ChatMessage(role="user", content="Find the bug."),
        ChatMessage(role="assistant", content="It is in parse()."),
    ]
    _, events, _ = await drive(tmp_path, [{"echo_prompt": True}], history=history)
    (echo,) = texts(events)
    assert "[user]\nFind the bug." in echo
    assert "[assistant]\nIt is in parse()." in echo
    assert "for context only" in echo


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("refusal", "refused to continue"),
        ("max_tokens", "token limit"),
        ("max_turn_requests", "limit of model requests"),
    ],
)
async def test_a_stop_reason_other_than_end_turn_is_an_error_with_the_reason(
    tmp_path: Path, reason: str, words: str
) -> None:
    outcome, _, _ = await drive(tmp_path, [{"say": "partial"}, {"stop": reason}])
    result = outcome.result()
    assert result.status == "error" and not result.success
    assert result.failure is not None and result.failure.kind == "agent_error"
    assert words in result.message and reason in result.message
    assert result.summary == "partial"


async def test_a_turn_that_fails_once_the_budget_is_spent_is_budget_exhausted(
    tmp_path: Path,
) -> None:
    meter = FakeMeter(Usage(900, 200), 3)
    meter.exhausted = True
    outcome, _, _ = await drive(tmp_path, [{"stop": "refusal"}], meter=meter)
    result = outcome.result()
    assert result.failure is not None and result.failure.kind == "budget_exhausted"
    assert result.message.startswith("the sub-agent's token budget ran out")
    assert result.usage == Usage(900, 200)


# --- a hostile or broken agent ----------------------------------------------------------------


async def test_garbage_on_the_agents_stdout_fails_the_run_as_protocol(tmp_path: Path) -> None:
    outcome, _, _ = await drive(tmp_path, [{"raw": "this is not json\n"}, {"wait": 30}])
    result = outcome.result()
    assert result.failure is not None and result.failure.kind == "protocol"
    assert "not JSON" in result.message and "this is not json" in result.message


async def test_a_line_over_the_cap_fails_the_run_as_oversize(tmp_path: Path) -> None:
    outcome, _, _ = await drive(
        tmp_path,
        [{"raw": "x" * 200_000}, {"wait": 30}],
        limits=AcpLimits(wall=30, max_line_bytes=64 * 1024),
    )
    result = outcome.result()
    assert result.failure is not None and result.failure.kind == "oversize", result
    assert str(64 * 1024) in result.message


async def test_an_agent_that_never_answers_initialize_is_unresponsive(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome, _, _ = await drive(
        tmp_path, [], argv=["--mute"], limits=AcpLimits(wall=30, handshake=0.5)
    )
    result = outcome.result()
    assert time.monotonic() - started < 10
    assert result.failure is not None and result.failure.kind == "unresponsive"
    assert result.failure.limit == "handshake=0.5s"


async def test_silence_during_the_prompt_trips_the_idle_limit(tmp_path: Path) -> None:
    outcome, _, _ = await drive(
        tmp_path, [{"say": "thinking"}, {"hang": 60}], limits=AcpLimits(wall=30, idle=0.5)
    )
    result = outcome.result()
    assert result.failure is not None and result.failure.kind == "unresponsive"
    assert result.failure.limit == "idle=0.5s"


async def test_the_wall_clock_bounds_the_whole_run(tmp_path: Path) -> None:
    outcome, _, _ = await drive(tmp_path, [{"hang": 60}], limits=AcpLimits(wall=1.0))
    result = outcome.result()
    assert result.failure is not None and result.failure.kind == "timeout"
    assert result.failure.limit == "wall=1s"


async def test_an_agent_speaking_another_protocol_version_is_refused(tmp_path: Path) -> None:
    outcome, _, _ = await drive(tmp_path, [], argv=["--version", "7"])
    result = outcome.result()
    assert result.failure is not None and result.failure.kind == "protocol"
    assert "ACP version 7" in result.message
