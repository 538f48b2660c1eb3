"""`fork` sub-agents are continuable like `spawn` ones: under `continuable=True` a forked
sub-agent is a continuable agent whose session starts with the turns it was forked from, so a
warm follow-up, a cold resume after its child is gone, and a cold resume in a supervisor that
never saw it all carry them. A sub-agent of a provider that runs its agent once is refused a
follow-up with the reason and the providers that can be continued. Real children; the models
are written in Python because the orchestrator's must read the agent ids it is handed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from book import ORCHESTRATOR, script, turn
from book import call as cli_call
from book import complete as cli_complete
from book import task as cli_task

from tether.parent import Supervisor
from tether.parent.delegation import RunRequest, SubagentDefinition, builtin_registry
from tether.parent.run.spec import NamedModel
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolCall,
    Usage,
)

pytestmark = pytest.mark.anyio

MODEL = "scripted:continued-forks"
NOTES = "TODO: ship it"
Step = Callable[[list[dict[str, Any]]], ToolCall]


def users(messages: list[ChatMessage]) -> list[str]:
    return [m.content for m in messages if m.role == "user"]


def answer(*calls: ToolCall) -> ModelCompleteResult:
    return ModelCompleteResult(
        message=ChatMessage(role="assistant", content="", tool_calls=list(calls)),
        usage=Usage(input_tokens=10, output_tokens=1),
    )


class Models:
    """The orchestrator's model takes `steps` in turn, each given the results of its
    parent-tool calls so far (decoded; their ids start with `c`); every sub-agent completes at
    once, its summary naming the user messages of its transcript. Every sub-agent request is
    kept."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.results: list[dict[str, Any]] = []
        self.sub: list[ModelCompleteParams] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        if params.run_id.startswith("orch-"):
            self.results = [
                json.loads(m.content.removeprefix("error: "))
                for m in params.messages
                if m.role == "tool" and (m.tool_call_id or "").startswith("c")
            ]
            n = sum(m.role == "assistant" for m in params.messages)
            if n < len(self.steps):
                return answer(self.steps[n](self.results))
            return answer(ToolCall(id="done", name="complete", arguments={"summary": "done"}))
        self.sub.append(params)
        seen = " | ".join(users(params.messages))
        return answer(ToolCall(id="fin", name="complete", arguments={"summary": f"seen: {seen}"}))

    def requests_of(self, prompt: str) -> list[ModelCompleteParams]:
        """The sub-agent requests of every run that holds `prompt` as a user message."""
        return [p for p in self.sub if prompt in users(p.messages)]


def read_notes(_: list[dict[str, Any]]) -> ToolCall:
    return ToolCall(id="r1", name="read_file", arguments={"path": "notes.txt"})


def task(call_id: str, prompt: str, **more: Any) -> Step:
    arguments = {"subagent_type": "explorer", "description": prompt[:40], "prompt": prompt}
    return lambda _: ToolCall(id=call_id, name="task", arguments={**arguments, **more})


def message(call_id: str, to: int, text: str) -> Step:
    """A `send_message` to the sub-agent of the `to`-th result (0-based)."""

    def step(results: list[dict[str, Any]]) -> ToolCall:
        agent_id = results[to]["subagentId"]
        return ToolCall(
            id=call_id, name="send_message", arguments={"agent_id": agent_id, "message": text}
        )

    return step


def assert_forked(params: ModelCompleteParams) -> None:
    """What a fork of this orchestration starts from: its prompt, its read_file exchange (a
    tool the explorer has: still a call), and its task and send_message exchanges (tools it
    lacks: text)."""
    messages = params.messages
    assert users(messages)[0] == "Write the notes."
    [read] = [c for m in messages for c in m.tool_calls if c.name == "read_file"]
    assert read.id == "r1"
    assert any(m.role == "tool" and m.tool_call_id == "r1" and NOTES in m.content for m in messages)
    parent_tools = {"task", "send_message", "list_agents"}
    assert not [c for m in messages for c in m.tool_calls if c.name in parent_tools]
    text = "\n".join(m.content for m in messages)
    assert "[called task c1:" in text and "[called send_message c2:" in text


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text(NOTES + "\n")
    return ws


async def test_a_fork_sub_agent_continues_warm_and_cold_from_the_turns_it_was_forked_from(
    tmp_path: Path, workspace: Path
) -> None:
    models = Models(
        [
            read_notes,
            task("c1", "First look."),
            message("c2", 0, "And the FIXMEs?"),
            task("c3", "Look again.", agentType="fork"),
            message("c4", 2, "warm?"),
        ]
    )
    state = tmp_path / "state"
    async with Supervisor(state_dir=state) as sup:
        got = await sup.orchestrate(
            "Write the notes.",
            model=NamedModel(MODEL, models),
            workspace=workspace,
            continuable=True,
            keep_alive=60,
        )
        assert got.success, got.result
        forked, warm = models.results[2], models.results[3]
        agent_id = forked["subagentId"]
        assert forked["status"] == "completed" and agent_id.startswith("ag_")
        assert warm["agentId"] == agent_id and warm["status"] == "completed"
        assert warm["summary"].endswith("Look again. | warm?")
        first, after = models.requests_of("Look again.")[:2]
        assert after.run_id == first.run_id  # warm: the same child took the follow-up
        assert_forked(first)
        assert_forked(after)
        [record] = [r for r in got.ledger.records if r.role == "task" and r.agent_id == agent_id]
        assert record.provider == "fork"

        # Its child dies: the next message resumes it cold, from its stored transcript.
        handle = sup.agents.live_handle(agent_id)
        assert handle is not None and handle.pid is not None
        psutil.Process(handle.pid).kill()
        with anyio.fail_after(10):
            await handle.wait()
        cold = await sup.send_message(agent_id, "cold?")
        assert cold.success and cold.summary.endswith("Look again. | warm? | cold?")
        resumed = models.sub[-1]
        assert resumed.run_id != first.run_id
        assert_forked(resumed)

    # A supervisor that never saw the agent resumes it from the store alone.
    async with Supervisor(state_dir=state) as elsewhere:
        again = await elsewhere.send_message(
            agent_id, "and elsewhere?", model=NamedModel(MODEL, models)
        )
    assert again.success and again.summary.endswith("warm? | cold? | and elsewhere?")
    assert_forked(models.sub[-1])


async def test_a_fork_sub_agent_is_resumed_cold_once_its_keep_alive_has_passed(
    tmp_path: Path, workspace: Path
) -> None:
    models = Models([read_notes, task("c1", "Look again.", agentType="fork")])
    async with Supervisor(state_dir=tmp_path / "state") as sup:
        got = await sup.orchestrate(
            "Write the notes.",
            model=NamedModel(MODEL, models),
            workspace=workspace,
            continuable=True,
            keep_alive=0,
        )
        assert got.success, got.result
        agent_id = models.results[0]["subagentId"]
        with anyio.fail_after(10):
            while sup.agents.is_warm(agent_id):
                await anyio.sleep(0.02)
        cold = await sup.send_message(agent_id, "still there?")
    assert cold.success and cold.summary.endswith("Look again. | still there?")
    [first, resumed] = models.requests_of("Look again.")
    assert resumed.run_id != first.run_id
    for params in (first, resumed):
        assert users(params.messages)[0] == "Write the notes."
        assert any(m.tool_call_id == "r1" and NOTES in m.content for m in params.messages)


async def test_a_follow_up_to_a_sub_agent_that_ran_once_is_refused_with_why_and_who_can(
    tmp_path: Path, workspace: Path
) -> None:
    """A `providers=` runner runs its sub-agent once; the model's follow-up is refused before
    anything runs, saying why and which providers keep a session. An `inprocess` sub-agent
    keeps one (its runtime in memory holds the run as a child process would): its follow-up
    is served."""
    runs: list[str] = []

    async def once(request: RunRequest) -> RunResult:
        runs.append(request.prompt)
        return RunResult(success=True, status="completed", summary="ran once")

    outsider = SubagentDefinition(
        type="outsider", description="Runs elsewhere.", provider="outside", read_only=True
    )
    models = Models(
        [
            task("c1", "In the parent.", agentType="inprocess"),
            message("c2", 0, "more?"),
            task("c3", "Elsewhere.", subagent_type="outsider"),
            message("c4", 2, "more?"),
        ]
    )
    async with Supervisor(state_dir=tmp_path / "state") as sup:
        got = await sup.orchestrate(
            "Write the notes.",
            model=NamedModel(MODEL, models),
            definitions=[*builtin_registry(), outsider],
            workspace=workspace,
            continuable=True,
            keep_alive=30,
            agent_types=["spawn", "inprocess"],
            providers={"outside": once},
        )
        agents = await sup.list_agents()
    assert got.success, got.result
    inprocess, continued, outside, refused = models.results
    assert inprocess["status"] == "completed" and inprocess["subagentId"].startswith("ag_")
    assert continued["status"] == "completed" and continued["subagentId"] == inprocess["subagentId"]
    assert continued["summary"].endswith("| more?")
    assert outside["status"] == "completed" and outside["subagentId"] == "sa-2"
    assert [a.id for a in agents] == [inprocess["subagentId"]]
    assert runs == ["Elsewhere."]  # the outsider became no session; nothing re-ran
    who_can = (
        "only sub-agents run by spawn, fork, command, inprocess (a command's child must "
        "announce agentMessage) keep a session. Start a new task call instead."
    )
    assert refused["error"] == "cannot_continue"
    assert refused["message"] == (
        "Sub-agent sa-2 cannot be continued: it ran on 'outside', a runner this delegation was "
        f"given (providers=), which runs a sub-agent once and keeps no session; {who_can}"
    )
    assert [r.role for r in got.ledger.records] == ["task", "follow_up", "task"]


def test_tether_agents_send_resumes_a_fork_of_a_continuable_orchestration_cold(
    tmp_path: Path, workspace: Path
) -> None:
    """The printed hint, as printed, in another process: the fork's session holds the
    orchestrator's turns it was forked from, and the cold resume shows them to its model."""
    book = {
        "scripts": [
            script(
                ORCHESTRATOR,
                turn(cli_call("read_file", path="notes.txt")),
                turn(cli_task("c1", "explorer", "look again", "Look again.", agentType="fork")),
                turn(cli_complete("looked")),
            ),
            # Matched only by a request that holds the forked turns (the notes' text).
            script("Role: explorer(?s:.*)TODO: ship it", turn(cli_complete("forked"))),
        ]
    }
    model = tmp_path / "book.json"
    model.write_text(json.dumps(book))
    state = tmp_path / "state"
    got = tether(
        "orchestrate", "Write the notes.", "--model", f"scripted:{model}",
        "--workspace", str(workspace), "--continuable", "--state", str(state),
        "--keep-alive", "0", "--quiet",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    [agent_id] = re.findall(r"continue: tether agents send (ag_[0-9a-f]+) MESSAGE", got.stdout)
    sent = tether("agents", "send", agent_id, "And now?", "--state", str(state), "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["summary"] == "forked"
    shown = tether("agents", "show", agent_id, "--all", "--state", str(state), "--json")
    transcript = json.loads(shown.stdout)["transcript"]
    said = [m["content"] for m in transcript if m["role"] == "user"]
    assert said[0] == "Write the notes." and said[-2:] == ["Look again.", "And now?"]
    assert transcript[1]["toolCalls"][0]["name"] == "read_file"
    assert NOTES in transcript[2]["content"]


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tether.parent.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
