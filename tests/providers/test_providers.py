"""Named providers on the supervisor: the registry, the built-in `spawn`, `fork`, `command` and
`inprocess`, and providers a user writes (one that only prepares the request, one that drives
its own process through the spawn seam) — each against real children."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tether.parent import ChildConfig, Limits, ScriptedModel, Supervisor
from tether.parent.process.isolation import probe_host
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event, RunStarted
from tether.parent.run.provider import Provider, SubagentRequest, SubagentRun
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    Usage,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
CHILDREN = ROOT / "tests" / "children"
NODE_CHILD = ROOT / "examples" / "node-child" / "child.js"
NODE = shutil.which("node")
BUILD = AgentDefinition(type="builder", description="may write", read_only=False)
COMPLETE = '[{"text": "done", "toolCalls": [{"name": "complete", "arguments": {"summary": "ok"}}]}]'


class Recording:
    """Answers each turn with `complete(summary)` and records what it was asked."""

    def __init__(self, summary: str = "ok") -> None:
        self.summary = summary
        self.requests: list[ModelCompleteParams] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        from tether.protocol.messages import ToolCall

        self.requests.append(params)
        return ModelCompleteResult(
            message=ChatMessage(
                role="assistant",
                content="",
                tool_calls=[
                    ToolCall(id="c1", name="complete", arguments={"summary": self.summary})
                ],
            ),
            usage=Usage(input_tokens=5, output_tokens=3),
            stop_reason="tool_use",
        )


@pytest.fixture
async def sup() -> AsyncIterator[Supervisor]:
    async with Supervisor(ChildConfig(dispose=DisposePolicy(0.5, 0.5, 0.5, 2.0))) as s:
        yield s


# --- the registry -------------------------------------------------------------------------------


async def test_every_supervisor_has_the_five_builtin_providers_side_by_side(
    sup: Supervisor,
) -> None:
    assert sup.providers.names() == ["spawn", "fork", "command", "inprocess", "acp"]
    report = {r["name"]: r for r in sup.providers.report()}
    assert report["spawn"]["ready"] and report["inprocess"]["ready"]
    assert not report["acp"]["ready"] and "needs its agent's command" in report["acp"]["why"]
    assert not report["command"]["ready"] and "command:ARGV" in report["command"]["why"]


async def test_a_provider_name_is_checked_and_taken_once(sup: Supervisor) -> None:
    class Named(Provider):
        def __init__(self, name: str) -> None:
            self.name = name

    sup.providers.register(Named("mine"))
    with pytest.raises(ValueError, match="already registered"):
        sup.providers.register(Named("mine"))
    for bad in ("Mine", "1x", "a:b", ""):
        with pytest.raises(ValueError, match="provider name"):
            sup.providers.register(Named(bad))
    assert "mine" in sup.providers


async def test_an_unknown_provider_is_bad_usage_naming_the_known_ones(
    sup: Supervisor, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=r"no provider named 'nope'.*spawn, fork, command"):
        await sup.start("x", workspace=tmp_path, provider="nope")


# --- spawn, fork, command ---------------------------------------------------------------------


async def test_spawn_is_the_default_and_runs_a_fresh_tether_child(
    sup: Supervisor, tmp_path: Path
) -> None:
    events: list[Event] = []
    result = await sup.run(
        "go", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE), on_event=events.append
    )
    named = await sup.run(
        "go", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE), provider="spawn"
    )
    assert result.success and named.success
    assert named.isolation == result.isolation and result.isolation is not None
    assert result.isolation.level == probe_host().best
    started = [e for e in events if isinstance(e, RunStarted)]
    assert started and started[0].pid != os.getpid() and "tether.child" in started[0].argv


@pytest.mark.in_memory
async def test_fork_starts_from_the_callers_completed_turns(tmp_path: Path) -> None:
    async with Supervisor(ChildConfig(transport="memory")) as sup:
        first = Recording("first done")
        caller = await sup.start("the caller's own task", workspace=tmp_path, model=first)
        assert (await caller.result()).success
        forked = Recording("fork done")
        result = await sup.run(
            "the fork's task", workspace=tmp_path, model=forked, provider="fork", fork_from=caller
        )
        # A plain spawn of the same task sees only its prompt.
        plain = Recording()
        await sup.run("the fork's task", workspace=tmp_path, model=plain)
    assert result.success and result.summary == "fork done"
    sent = [(m.role, m.content) for m in forked.requests[0].messages if m.role != "system"]
    assert sent[0] == ("user", "the caller's own task")
    assert sent[-1] == ("user", "the fork's task")
    assert [m.content for m in plain.requests[0].messages if m.role != "system"] == [
        "the fork's task"
    ]


async def test_a_fork_without_a_caller_is_bad_usage(sup: Supervisor, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="caller's completed turns"):
        await sup.start("x", workspace=tmp_path, provider="fork")


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed")
async def test_command_runs_any_executable_speaking_the_protocol(
    sup: Supervisor, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    result = await sup.run(
        "list",
        workspace=tmp_path,
        model=ScriptedModel.from_json(COMPLETE),
        provider=f"command:{NODE} {NODE_CHILD}",
    )
    assert result.success and result.summary == "ok", result
    assert result.isolation is not None and result.isolation.level == probe_host().best


async def test_command_needs_its_command_once(sup: Supervisor, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the command"):
        await sup.start("x", workspace=tmp_path, provider="command")
    with pytest.raises(ValueError, match="give the command once"):
        await sup.start("x", workspace=tmp_path, provider="command:a", command=["b"])


@pytest.mark.parametrize(
    "provider",
    ["spawn", "command"],
)
async def test_a_child_that_crashes_is_a_failed_result_with_the_same_kind_under_every_provider(
    sup: Supervisor, tmp_path: Path, provider: str
) -> None:
    crash = [sys.executable, str(CHILDREN / "exit_mid_run.py")]
    result = await sup.run(
        "x",
        workspace=tmp_path,
        model=ScriptedModel.from_json(COMPLETE),
        command=crash,
        provider=provider if provider != "command" else None,
    )
    assert not result.success and result.failure is not None
    assert result.failure.kind == "exit_nonzero" and "flux capacitor" in result.message


# --- inprocess ----------------------------------------------------------------------------------


@pytest.mark.in_memory
async def test_inprocess_runs_the_same_loop_without_a_process_and_says_so(
    sup: Supervisor, tmp_path: Path
) -> None:
    events: list[Event] = []
    turns = {
        "turns": [
            {
                "text": "",
                "toolCalls": [
                    {"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}
                ],
            },
            {
                "text": "",
                "toolCalls": [
                    {"name": "complete", "arguments": {"summary": "wrote it", "paths": ["a.txt"]}}
                ],
            },
        ]
    }
    result = await sup.run(
        "write",
        agent=BUILD,
        workspace=tmp_path,
        model=ScriptedModel.from_json(json.dumps(turns)),
        provider="inprocess",
        on_event=events.append,
    )
    assert result.success and result.summary == "wrote it", result
    assert (tmp_path / "a.txt").read_text() == "hi"
    assert [a.path for a in result.artifacts] == [str(tmp_path / "a.txt")]
    assert result.isolation is not None and result.isolation.level == "none"
    assert result.isolation.warning and "no process isolation" in result.isolation.warning
    assert result.usage.input_tokens > 0 and result.iteration_count == 2
    started = [e for e in events if isinstance(e, RunStarted)]
    assert started[0].pid == os.getpid()
    assert any(isinstance(e, ChildEvent) and e.kind == "tool_call" for e in events)


@pytest.mark.in_memory
async def test_inprocess_keeps_explore_mode_and_the_workspace_confinement(
    sup: Supervisor, tmp_path: Path
) -> None:
    turns = {
        "turns": [
            {
                "text": "",
                "toolCalls": [
                    {"name": "write_file", "arguments": {"path": "x.txt", "content": "no"}},
                    {"name": "read_file", "arguments": {"path": "../../etc/passwd"}},
                ],
            },
            {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "tried"}}]},
        ]
    }
    model = ScriptedModel.from_json(json.dumps(turns))
    result = await sup.run("try", workspace=tmp_path, model=model, provider="inprocess")
    assert result.success
    assert not (tmp_path / "x.txt").exists()  # `general` is read-only: explore mode


async def test_inprocess_bash_gets_the_scrubbed_environment_not_the_supervisors_keys(
    sup: Supervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = "sk-canary-" + os.urandom(6).hex()
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    turns = {
        "turns": [
            {
                "text": "",
                "toolCalls": [{"name": "bash", "arguments": {"command": "env > env.txt"}}],
            },
            {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "ok"}}]},
        ]
    }
    result = await sup.run(
        "env",
        agent=BUILD,
        workspace=tmp_path,
        model=ScriptedModel.from_json(json.dumps(turns)),
        provider="inprocess",
    )
    assert result.success, result
    dumped = (tmp_path / "env.txt").read_text()
    assert "PATH=" in dumped and canary not in dumped


@pytest.mark.in_memory
async def test_inprocess_is_cancelled_like_a_child(sup: Supervisor, tmp_path: Path) -> None:
    slow = ScriptedModel.from_json('[{"text": "thinking", "delay": 30}]')
    events: list[Event] = []
    handle = await sup.start(
        "x", workspace=tmp_path, model=slow, provider="inprocess", on_event=events.append
    )
    with anyio.fail_after(20):
        while not any(isinstance(e, ChildEvent) and e.kind == "step" for e in events):
            await anyio.sleep(0.01)
        result = await handle.cancel("enough")
    assert result.status == "aborted" and result.failure is not None
    assert result.failure.kind == "cancelled"


@pytest.mark.in_memory
async def test_inprocess_honours_the_wall_clock(sup: Supervisor, tmp_path: Path) -> None:
    slow = ScriptedModel.from_json('[{"text": "thinking", "delay": 30}]')
    with anyio.fail_after(20):
        result = await sup.run(
            "x", workspace=tmp_path, model=slow, provider="inprocess", limits=Limits(wall=0.5)
        )
    assert result.failure is not None and result.failure.kind == "timeout"


@pytest.mark.in_memory
async def test_inprocess_cannot_promise_a_sandbox(tmp_path: Path) -> None:
    async with Supervisor(ChildConfig(isolation="process")) as sup:
        with pytest.raises(ValueError, match="cannot give isolation='process'"):
            await sup.start("x", workspace=tmp_path, provider="inprocess")


# --- providers a user writes ------------------------------------------------------------------


class NodeChildProvider(Provider):
    """A provider that only prepares the request: the Node child, as a tether child."""

    name = "node-child"
    summary = "the example Node.js child"

    def problem(self, argument: str | None = None) -> str | None:
        return None if NODE else "Node.js is not installed"

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        import dataclasses

        cfg = dataclasses.replace(request.config, command=(NODE or "node", str(NODE_CHILD)))
        return request.replace(config=cfg)


class ReverseProvider(Provider):
    """A provider that drives its own process: it spawns a line-reversing program through the
    spawn seam, asks the run's model once, and answers with both."""

    name = "reverse"
    summary = "reverses the prompt in a child process"

    async def run(self, run: SubagentRun) -> RunResult | None:
        code = "import sys; print(sys.stdin.readline().strip()[::-1], flush=True)"
        async with run.spawn([sys.executable, "-I", "-c", code]) as child:
            await child.proc.stdin.send(run.request.prompt.encode() + b"\n")
            line = b""
            while not line.endswith(b"\n"):
                line += await child.proc.stdout.receive()
            run.prompts = 1
        run.emit("text", {"text": "reversed"})
        turn = await run.complete([ChatMessage(role="user", content="rate it")])
        return RunResult(
            success=True,
            status="completed",
            summary=f"{line.decode().strip()} / {turn.message.content}",
            usage=Usage(input_tokens=999_999),  # a claim the parent replaces with its count
        )


class Broken(Provider):
    name = "broken"

    async def run(self, run: SubagentRun) -> RunResult | None:
        raise RuntimeError("a bug in the provider")


async def test_a_users_provider_that_prepares_the_request_runs_through_the_spawn_seam(
    sup: Supervisor, tmp_path: Path
) -> None:
    if NODE is None:
        pytest.skip("Node.js is not installed")
    sup.providers.register(NodeChildProvider())
    assert {"name": "node-child", "summary": "the example Node.js child", "ready": True} in (
        sup.providers.report()
    )
    result = await sup.run(
        "x", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE), provider="node-child"
    )
    assert result.success, result
    assert result.isolation is not None and result.isolation.level == probe_host().best


async def test_a_users_provider_that_drives_its_own_process_gets_the_parents_last_word(
    sup: Supervisor, tmp_path: Path
) -> None:
    sup.providers.register(ReverseProvider())
    model = ScriptedModel.from_json('[{"text": "five stars"}]')
    events: list[Event] = []
    result = await sup.run(
        "tether", workspace=tmp_path, model=model, provider="reverse", on_event=events.append
    )
    assert result.success and result.summary == "rehtet / five stars", result
    # The parent's own count, not the provider's claim; its run id and isolation.
    assert result.usage.input_tokens < 999_999 and result.iteration_count == 1
    assert result.run_id and result.isolation is not None
    assert result.isolation.level == probe_host().best and result.turn_count == 1
    started = [e for e in events if isinstance(e, RunStarted)]
    assert len(started) == 1 and started[0].pid != os.getpid()
    assert any(isinstance(e, ChildEvent) and e.data.get("text") == "reversed" for e in events)


async def test_a_provider_that_fails_ends_the_run_as_an_agent_error_not_an_exception(
    sup: Supervisor, tmp_path: Path
) -> None:
    sup.providers.register(Broken())
    result = await sup.run("x", workspace=tmp_path, provider="broken")
    assert not result.success and result.status == "error"
    assert result.failure is not None and result.failure.kind == "agent_error"
    assert "a bug in the provider" in result.message


async def test_a_provider_that_drives_its_own_run_cannot_be_continuable(
    sup: Supervisor, tmp_path: Path
) -> None:
    from tether.parent import Continuation

    sup.providers.register(Broken())
    with pytest.raises(ValueError, match="only a tether child keeps a run for follow-ups"):
        await sup.start(
            "x", workspace=tmp_path, provider="broken", continuation=Continuation(keep_alive=1)
        )


async def test_a_provider_object_can_be_passed_without_registering_it(
    sup: Supervisor, tmp_path: Path
) -> None:
    model = ScriptedModel.from_json('[{"text": "ok"}]')
    result = await sup.run("abc", workspace=tmp_path, model=model, provider=ReverseProvider())
    assert result.success and result.summary.startswith("cba")
