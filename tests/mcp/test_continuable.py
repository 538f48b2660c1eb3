"""`tether mcp --continuable`: task sub-agents are continuable agents, and `send_message` /
`list_agents` reach them over MCP; driven by the SDK's stdio client against a real server."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest
from harness import (
    ASK,
    alive,
    gone,
    marked,
    model_script,
    serve,
    sub_agents,
    task_args,
    tree,
    workspace,
)

from tether.parent import ScriptedModel, Supervisor
from tether.parent.agents.tools import LIST_AGENTS_SPEC, SEND_MESSAGE_SPEC
from tether.parent.cli import main as cli
from tether.parent.delegation import Delegator, TaskOutput, builtin_registry
from tether.parent.delegation.runner import SupervisorRunner

pytestmark = pytest.mark.anyio


def args(tmp_path: Path, *more: str) -> list[str]:
    ws = workspace(tmp_path)
    script = model_script(tmp_path / "model.json")
    state = tmp_path / "state"
    model = f"scripted:{script}"
    return ["--continuable", "--state", str(state), "--model", model, "--workspace", str(ws), *more]


async def test_a_sub_agent_that_asks_is_answered_with_send_message_and_listed(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, *args(tmp_path)) as server:
        listed = {t.name: t for t in (await server.session.list_tools()).tools}
        asked = await server.session.call_tool("task", task_args(prompt=f"Read it. {ASK}"))
        out = msgspec.convert(asked.structured_content, TaskOutput)
        waiting = await server.session.call_tool("list_agents", {"status": "needs_input"})
        answered = await server.session.call_tool(
            "send_message", {"agent_id": out.subagent_id, "message": "notes.md"}
        )
        after = await server.session.call_tool("list_agents", {})
        refused = await server.session.call_tool("send_message", {"agent_id": "ag_nope"})
    assert list(listed) == ["task", "send_message", "list_agents"]
    assert listed["send_message"].input_schema == SEND_MESSAGE_SPEC.input_schema
    assert listed["list_agents"].input_schema == LIST_AGENTS_SPEC.input_schema
    assert "send_message" in (server.init.instructions or "")
    # The question is an answer the client reads, not an error.
    assert not asked.is_error
    assert (out.status, out.question) == ("needs_input", "Which file should I read?")
    assert out.subagent_id.startswith("ag_")
    assert "question: Which file should I read?" in asked.content[0].text
    [entry] = waiting.structured_content["agents"]
    assert (entry["agentId"], entry["question"]) == (out.subagent_id, "Which file should I read?")
    assert not answered.is_error
    assert answered.structured_content["status"] == "completed"
    assert answered.structured_content["summary"] == "read the file you named"
    [entry] = after.structured_content["agents"]
    assert entry["status"] == "idle"
    # A bad call is a result naming the problem; the schema is checked before the tool runs.
    assert refused.is_error and "message" in refused.content[0].text
    assert (tmp_path / "state").is_dir()  # the sessions are where --state says


async def test_a_continuable_servers_idle_children_go_when_the_client_disconnects(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, *args(tmp_path, "--keep-alive", "10m")) as server:
        done = await server.session.call_tool("task", task_args())
        assert not done.is_error
        idle = sub_agents(server.pid)
        assert idle, "the child should idle for its keep-alive"
        seen = [p.pid for p in tree(server.pid)]
    assert await gone(seen) == []
    assert marked(server.pid) == []
    assert "stopped; 1 sub-agent run(s), every child disposed" in server.log()


async def test_a_cancelled_continuable_task_is_disposed_before_the_cancellation_goes_on(
    tmp_path: Path,
) -> None:
    ws = workspace(tmp_path)
    model = ScriptedModel.from_json(json.dumps([{"text": "thinking", "delay": 60}]))
    stepping = anyio.Event()

    def seen(event: object) -> None:
        if getattr(event, "kind", None) == "step":
            stepping.set()

    children: list[int] = []
    async with Supervisor(state_dir=tmp_path / "state") as sup:
        runner = SupervisorRunner(sup, default_model=model, keep_alive=60, parent_run="t")
        delegator = Delegator(builtin_registry(), runner, workspace=ws)
        with anyio.CancelScope() as scope:

            async def cancel_once_running() -> None:
                with anyio.fail_after(30):
                    await stepping.wait()
                children.extend(sub_agents(os.getpid()))
                scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_once_running)
                await delegator.execute(task_args(), tool_call_id="c1", on_event=seen)
        # The moment the cancellation got through, the child was already gone.
        assert children and alive(children) == []


def test_state_and_keep_alive_need_continuable_and_a_keep_alive_must_read_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = f"scripted:{model_script(tmp_path / 'model.json')}"
    base = ["mcp", "--model", model, "--workspace", str(tmp_path)]
    assert cli.main([*base, "--keep-alive", "5m"]) == 2
    assert "--keep-alive applies only with --continuable" in capsys.readouterr().err
    assert cli.main([*base, "--continuable", "--keep-alive", "soon"]) == 2
    assert "soon" in capsys.readouterr().err


def test_a_continuable_server_whose_store_would_lie_in_its_workspace_is_refused_before_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = f"scripted:{model_script(tmp_path / 'model.json')}"
    base = ["mcp", "--continuable", "--model", model, "--workspace", str(tmp_path)]
    assert cli.main([*base, "--state", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err
    assert f"directory {tmp_path / 'state'} lies inside the workspace {tmp_path}" in err
    # The default store under HOME, when the workspace is HOME.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert cli.main(base) == 2
    assert f"{tmp_path / '.local/state/tether'} (the default" in capsys.readouterr().err
    assert not (tmp_path / "state").exists() and not (tmp_path / ".local").exists()


async def test_the_command_the_server_prints_continues_its_agents_after_it_is_gone(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, *args(tmp_path)) as server:
        done = await server.session.call_tool("task", task_args())
    out = msgspec.convert(done.structured_content, TaskOutput)
    assert out.subagent_id.startswith("ag_")
    [hint] = re.findall(r"continue one: (.*)$", server.log(), re.MULTILINE)
    argv = [
        {"ID": out.subagent_id, "MESSAGE": "Anything else?"}.get(w, w) for w in shlex.split(hint)
    ]
    assert argv[:3] == ["tether", "agents", "send"]
    assert argv[5:] == ["--state", str(tmp_path / "state")]
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    run = functools.partial(
        subprocess.run, argv, capture_output=True, text=True, timeout=90, check=False,
        cwd=tmp_path, env={**os.environ, "PATH": path},
    )  # fmt: skip
    sent = await anyio.to_thread.run_sync(run)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("completed: found the notes")
