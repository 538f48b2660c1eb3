"""The parent's own evidence is in every failed result, also when the child reported the
failure itself, and the counts are the parent's on every path.

(Issue 15, bug 3: a BYO agent that raised came back with `stderrTail: ""` and `rung: null`
although its stderr said why; a cancelled run had `rung: null`. Rough edge 9: a run that timed
out after taking steps reported `turns 0, iterations 0, tokens 0`.)
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import RUNGS

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""

AGENTS = Path(__file__).with_name("failing_agents.py")
FAST = ChildConfig(dispose=DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=1.0))
STEPS_THEN_STALL = """{"turns": [
  {"text": "Listing.", "toolCalls": [{"name": "list_dir", "arguments": {"path": "."}}],
   "usage": {"inputTokens": 100, "outputTokens": 10}},
  {"text": "Reading.", "toolCalls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
   "usage": {"inputTokens": 120, "outputTokens": 12}},
  {"text": "Thinking for a long time.", "delay": 60}
]}"""


async def test_an_agent_that_raises_keeps_its_stderr_tail_and_the_rung(tmp_path: Path) -> None:
    async with Supervisor(FAST) as sup:
        result = await sup.run("go", agent=f"{AGENTS}:raises", workspace=tmp_path)
    assert not result.success and result.failure is not None, result
    assert result.failure.kind == "agent_error"
    assert "the ledger is missing" in result.failure.stderr_tail
    assert "RuntimeError" in result.failure.stderr_tail
    assert result.failure.rung in RUNGS


async def test_a_cancelled_run_records_the_rung_its_child_needed(tmp_path: Path) -> None:
    waiting = anyio.Event()

    def on_event(ev: Event) -> None:
        if isinstance(ev, ChildEvent) and ev.kind == "report":
            waiting.set()

    async with Supervisor(FAST) as sup:
        handle = await sup.start(
            "go", agent=f"{AGENTS}:waits", workspace=tmp_path, on_event=on_event
        )
        with anyio.fail_after(20):
            await waiting.wait()
        result = await handle.cancel()
    assert result.status == "aborted" and result.failure is not None, result
    assert result.failure.kind == "cancelled"
    assert result.failure.rung in RUNGS


@pytest.mark.in_memory
async def test_a_run_cut_off_by_its_deadline_reports_the_steps_it_took(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    steps = 0

    def on_event(ev: Event) -> None:
        nonlocal steps
        if isinstance(ev, ChildEvent) and ev.kind == "step":
            steps += 1

    async with Supervisor(IN_MEMORY) as sup:
        result = await sup.run(
            "go",
            agent="explorer",
            workspace=tmp_path,
            model=ScriptedModel.from_json(STEPS_THEN_STALL),
            limits=Limits(wall="4s"),
            on_event=on_event,
        )
    assert result.failure is not None and result.failure.kind == "timeout", result
    assert steps >= 2
    assert result.iteration_count == 2  # the turns the parent answered (not the one cut off)
    assert result.turn_count == 1
    assert (result.usage.input_tokens, result.usage.output_tokens) == (220, 22)
