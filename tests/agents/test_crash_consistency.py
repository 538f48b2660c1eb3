"""Crash consistency under SIGKILL at any moment, kept as a guarantee: a supervisor whose
continuable agents keep receiving follow-ups is SIGKILLed (its process, and every other time
its whole process group) during a model turn, while a turn or an answer is being stored,
during a lease renewal, during a cold resume and at random moments, and restarted on the same
state directory each time (`benchmarks/crash.py`, seeded). After every kill the store passes
SQLite's integrity check, every follow-up whose answer was handed over is stored with that
answer in order and nothing half-written shows, nothing of the killed tree is alive 2 s later,
and the next process resumes every agent cold and gets its activation. Here at a small count;
`scripts/soak --crash 200` runs the large one.

The checker itself is tested too, on stores broken on purpose: a check that cannot fail would
make the stress test say nothing.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from tether.parent.agents.sessions import DB_NAME, Activation, SessionStore
from tether.protocol.messages import AgentDefinition, ChatMessage, ToolCall, Usage

ROOT = Path(__file__).resolve().parents[2]


def _benchmarks() -> ModuleType:
    """`benchmarks.crash`, with the `benchmarks` package loaded by path (the repository root
    is not on the import path)."""
    if "benchmarks" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "benchmarks",
            ROOT / "benchmarks" / "__init__.py",
            submodule_search_locations=[str(ROOT / "benchmarks")],
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules["benchmarks"] = package
        spec.loader.exec_module(package)
    import benchmarks.crash as crash

    return crash


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_busy_supervisor_sigkilled_at_random_moments_loses_nothing_it_acknowledged(
    tmp_path: Path,
) -> None:
    out = tmp_path / "crash.json"
    argv = ["--kills", "6", "--seed", "37", "--dir", str(tmp_path / "run"), "--json", str(out)]
    got = subprocess.run(
        [sys.executable, "-m", "benchmarks.crash", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=880,
    )
    report = json.loads(out.read_text()) if out.exists() else {}
    assert got.returncode == 0 and report, got.stdout[-4000:] + got.stderr[-4000:]
    assert report["violations"] == []
    # Every target and both kinds of kill were exercised, and every kill point was reached.
    assert report["byKind"] == {"process": 3, "group": 3}
    assert set(report["byTarget"]) == {"turn", "append", "settle", "heartbeat", "resume", "any"}
    rounds = report["rounds"]
    assert len(rounds) == 7 and all(r["reached"] for r in rounds), rounds
    assert report["acked"] >= 20
    # A restarted process took every agent over from its dead predecessor; the takeover time
    # itself is a figure for scripts/soak, not asserted here (a loaded machine restarts slowly).
    whys = {why for r in rounds[1:] for why in r["took_over"]}
    assert "owner_dead" in whys, whys
    assert report["takeovers"] >= 4 * 4


# --- the checker, on stores broken on purpose -----------------------------------------------


def _store(tmp_path: Path) -> tuple[Path, str]:
    """A store with one agent: a prompt, a turn with a tool call and its result."""
    state = tmp_path / "state"

    async def build() -> str:
        async with SessionStore(state) as store:
            agent = await store.create_agent(AgentDefinition())
            activation = await store.acquire(agent.id)
            assert isinstance(activation, Activation)
            await activation.append([ChatMessage(role="user", content="start 0")])
            call = ToolCall(id="c1", name="complete", arguments={"summary": "answer to start 0"})
            await activation.append(
                [
                    ChatMessage(role="assistant", content="turn 1", tool_calls=[call]),
                    ChatMessage(role="tool", content="done", tool_call_id="c1"),
                ],
                Usage(input_tokens=10, output_tokens=5),
            )
            await activation.release("idle")
            return agent.id

    return state, anyio.run(build)


def _sql(state: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(state / DB_NAME)
    with conn:
        for sql, params in statements:
            conn.execute(sql, params)
    conn.close()


def test_the_checker_passes_a_whole_store_and_finds_a_lost_acknowledged_follow_up(
    tmp_path: Path,
) -> None:
    crash = _benchmarks()
    state, agent = _store(tmp_path)
    acked = {agent: [("start 0", "answer to start 0", True)]}
    assert crash.check_store(state, acked, set()) == []
    lost = {agent: [("start 0", "answer to start 0", True), ("m 1 0 0", "answer to m 1 0 0", True)]}
    [violation] = crash.check_store(state, lost, {"m 1 0 0"})
    assert "acknowledged 'm 1 0 0' is not in the transcript" in violation


def test_the_checker_finds_an_answer_missing_after_its_message(tmp_path: Path) -> None:
    crash = _benchmarks()
    state, agent = _store(tmp_path)
    wrong = {agent: [("start 0", "answer to something else", True)]}
    assert crash.check_store(state, wrong, set()) == []  # not the driver's answer: not checked
    _sql(state, ("DELETE FROM messages WHERE agent_id = ? AND seq > 0", (agent,)))
    _sql(
        state,
        (
            "UPDATE agents SET message_count = 1, input_tokens = 0, output_tokens = 0, "
            "transcript_bytes = (SELECT length(body) FROM messages WHERE agent_id = ?)",
            (agent,),
        ),
    )
    acked = {agent: [("start 0", "answer to start 0", True)]}
    [violation] = crash.check_store(state, acked, set())
    assert "the answer to acknowledged 'start 0' is not stored after it" in violation


def test_the_checker_finds_a_turn_stored_without_its_usage_and_a_message_nobody_sent(
    tmp_path: Path,
) -> None:
    crash = _benchmarks()
    state, agent = _store(tmp_path)
    _sql(state, ("UPDATE agents SET input_tokens = 0 WHERE id = ?", (agent,)))
    assert any("usage 0/5 for 1 stored turns" in v for v in crash.check_store(state, {}, set()))
    _sql(state, ("UPDATE agents SET input_tokens = 10 WHERE id = ?", (agent,)))
    body = b'{"role":"user","content":"never sent"}'
    _sql(
        state,
        ("INSERT INTO messages VALUES (?, 99, ?)", (agent, body)),
        (
            "UPDATE agents SET message_count = message_count + 1, transcript_bytes = "
            "transcript_bytes + ? WHERE id = ?",
            (len(body), agent),
        ),
    )
    [violation] = crash.check_store(state, {}, set())
    assert "a user message nobody sent: 'never sent'" in violation


def test_the_checker_finds_a_turn_whose_calls_have_no_result_before_the_next_message(
    tmp_path: Path,
) -> None:
    crash = _benchmarks()
    state, agent = _store(tmp_path)
    _sql(state, ("DELETE FROM messages WHERE agent_id = ? AND seq = 2", (agent,)))
    body = b'{"role":"user","content":"m 1 0 0"}'
    _sql(state, ("INSERT INTO messages VALUES (?, 99, ?)", (agent, body)))
    _sql(
        state,
        (
            "UPDATE agents SET message_count = 3, transcript_bytes = (SELECT "
            "SUM(length(body)) FROM messages WHERE agent_id = ?)",
            (agent,),
        ),
    )
    [violation] = crash.check_store(state, {}, {"m 1 0 0"})
    assert "follows calls with no result: ['c1']" in violation
