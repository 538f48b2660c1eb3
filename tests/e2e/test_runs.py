"""A sub-agent run end to end: the real supervisor driving the real child runtime — a child
process, or (the in-memory tier) the same runtime in memory where no process is the point."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.limits import Limits
from tether.parent.run.events import ChildEvent, Event, RunFinished, RunStarted
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import AgentDefinition

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""

COMPLETE = """{"turns": [
  {"text": "Reading the notes."},
  {"text": "Done.", "toolCalls": [{"name": "complete",
    "arguments": {"summary": "found it", "paths": ["notes.txt", "missing.txt"]}}]}
]}"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("TODO: everything\n")
    return tmp_path


async def test_a_scripted_run_completes_with_artifacts_and_skipped_paths(workspace: Path) -> None:
    events: list[Event] = []
    async with Supervisor() as sup:
        result = await sup.run(
            "find the notes",
            workspace=workspace,
            model=ScriptedModel.from_json(COMPLETE),
            limits=Limits(wall="20s"),
            on_event=events.append,
        )
    assert result.success, result
    assert result.status == "completed"
    assert result.summary == "found it"
    assert [a.path for a in result.artifacts] == [str(workspace / "notes.txt")]
    assert result.artifacts[0].fs_type == "file"
    assert result.artifacts[0].size == len("TODO: everything\n")
    assert [s.path for s in result.skipped] == ["missing.txt"]
    assert result.iteration_count == 2
    assert result.usage.output_tokens > 0
    assert result.containment
    assert isinstance(events[0], RunStarted) and events[0].pid > 0
    assert isinstance(events[-1], RunFinished) and events[-1].result == result


@pytest.mark.in_memory
async def test_child_events_arrive_in_order_with_a_strictly_increasing_seq(
    workspace: Path,
) -> None:
    seen: list[ChildEvent] = []
    async with Supervisor(IN_MEMORY) as sup:
        sup.subscribe(lambda ev: seen.append(ev) if isinstance(ev, ChildEvent) else None)
        result = await sup.run("go", workspace=workspace, model=ScriptedModel.from_json(COMPLETE))
    assert result.success
    seqs = [ev.seq for ev in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    kinds = [ev.kind for ev in seen]
    assert kinds[0] == "started"
    for kind in ("step", "text", "tool_call", "tool_result"):
        assert kind in kinds
    assert {ev.run_id for ev in seen} == {result.run_id}


@pytest.mark.in_memory
async def test_the_events_stream_yields_what_the_run_reported(workspace: Path) -> None:
    async with Supervisor(IN_MEMORY) as sup, sup.events() as stream:
        result = await sup.run("go", workspace=workspace, model=ScriptedModel.from_json(COMPLETE))
        got = []
        async for ev in stream:
            got.append(ev)
            if isinstance(ev, RunFinished):
                break
    assert got[-1] == RunFinished(result.run_id, result)


@pytest.mark.in_memory
async def test_the_builtin_loop_without_a_model_is_refused_before_spawning(
    workspace: Path,
) -> None:
    async with Supervisor(IN_MEMORY) as sup:
        with pytest.raises(ValueError, match="built-in agent loop, which needs a model"):
            await sup.start("go", workspace=workspace)
        assert not sup._live


async def test_a_custom_agent_that_asks_for_a_model_without_one_fails_with_a_clear_agent_error(
    workspace: Path,
) -> None:
    # A custom agent may need no model, so it is not refused; when it asks for one anyway,
    # the parent's refusal says why there is none (the agent did not catch it: its stderr).
    agent = Path(__file__).parents[1] / "child" / "agents" / "byo_agent.py"
    async with Supervisor() as sup:
        result = await sup.run("go", agent=f"{agent}:make", workspace=workspace)
    assert not result.success
    assert result.failure is not None and result.failure.kind == "agent_error"
    assert "no model is configured" in result.failure.stderr_tail


@pytest.mark.in_memory
async def test_a_run_that_exhausts_its_iterations_keeps_its_last_text(workspace: Path) -> None:
    script = '[{"text": "one"}, {"text": "two"}, {"text": "three"}]'
    async with Supervisor(IN_MEMORY) as sup:
        result = await sup.run(
            "go",
            workspace=workspace,
            agent=AgentDefinition(type="general", max_iterations=2),
            model=ScriptedModel.from_json(script),
        )
    assert not result.success
    assert result.failure is not None and result.failure.kind == "budget_exhausted"
    assert result.summary == "two"


async def test_cancelling_a_real_child_mid_run_gives_aborted(workspace: Path) -> None:
    script = '[{"text": "thinking", "delay": 30}]'
    async with Supervisor() as sup:
        started = []
        handle = await sup.start(
            "go",
            workspace=workspace,
            model=ScriptedModel.from_json(script),
            on_event=lambda ev: started.append(ev) if isinstance(ev, ChildEvent) else None,
        )
        import anyio

        with anyio.fail_after(10):
            while not started:
                await anyio.sleep(0.01)
        result = await handle.cancel()
    assert not result.success
    assert result.status == "aborted"
    assert result.failure is not None and result.failure.kind == "cancelled"


@pytest.mark.parametrize("spawner", ["exec", "zygote"])
async def test_the_child_sees_a_scrubbed_environment(
    workspace: Path, monkeypatch, spawner: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary-2")
    monkeypatch.setenv("GITHUB_TOKEN", "canary-3")
    monkeypatch.setenv("LANG", "C.UTF-8")
    environ: dict[str, str] = {}
    script = '[{"text": "waiting", "delay": 30}]'
    events: list[ChildEvent] = []
    async with Supervisor(ChildConfig(spawner=spawner)) as sup:
        handle = await sup.start(
            "go",
            workspace=workspace,
            model=ScriptedModel.from_json(script),
            on_event=lambda ev: events.append(ev) if isinstance(ev, ChildEvent) else None,
        )
        import anyio

        # The child runtime runs (its run has started): it is set up, whichever spawner
        # started it (an exec'd child switches images, a forked one starts as the zygote).
        with anyio.fail_after(10):
            while not events:
                await anyio.sleep(0.01)
        assert handle.pid is not None
        raw = Path(f"/proc/{handle.pid}/environ").read_bytes()
        environ = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
        assert os.getsid(handle.pid) == handle.pid
        assert os.getpgid(handle.pid) == handle.pid
        limits = Path(f"/proc/{handle.pid}/limits").read_text()
        await handle.cancel()
    for canary in ("OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"):
        assert canary not in environ
    assert "sk-canary-1" not in raw.decode()
    assert environ["LANG"] == "C.UTF-8"
    assert "PATH" in environ
    core = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
    assert core.split()[4:6] == ["0", "0"]


@pytest.mark.in_memory
async def test_compaction_goes_to_the_definitions_compaction_model(workspace: Path) -> None:
    summaries = workspace / "compact.json"
    summaries.write_text('[{"text": "unused"}]')
    long_text = "x" * 4000
    script = f'[{{"text": "{long_text}"}}, {{"text": "{long_text}"}}, {{"text": "done"}}]'
    seen: list[str] = []
    async with Supervisor(IN_MEMORY) as sup:
        result = await sup.run(
            "go",
            workspace=workspace,
            model=ScriptedModel.from_json(script),
            agent=AgentDefinition(
                type="general",
                max_iterations=3,
                stop_conditions=[],
                compaction_model=f"scripted:{summaries}",
                compaction_threshold=1500,
            ),
            on_event=lambda ev: (
                seen.append(ev.data.get("model", ""))
                if isinstance(ev, ChildEvent) and ev.kind == "compaction"
                else None
            ),
        )
    assert result.iteration_count == 3
    assert seen and all(model == f"scripted:{summaries}" for model in seen)
