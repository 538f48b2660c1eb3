"""The `acp` provider end to end through the supervisor: the Python ACP test agent
(tests/children/acp_agent.py) spawned through the one spawn seam, driven over its raw pipes,
its model calls brokered by the parent through the gateway, taken down by the ladder without a
`shutdown` rung. Sandboxed where the host can (the default level), else at the process level;
the network tests need the sandbox with a root supervisor."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.parent import ChildConfig, Limits, Supervisor
from tether.parent.process.isolation import probe_host
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event, RunStarted
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolApproveParams,
    ToolApproveResult,
    Usage,
)

pytestmark = pytest.mark.anyio

AGENT = Path(__file__).parent.parent / "children" / "acp_agent.py"
ACP = f"acp:{sys.executable} {AGENT}"
SANDBOX = probe_host().why_not is None
needs_netns = pytest.mark.skipif(
    not (SANDBOX and os.geteuid() == 0),
    reason="the gateway's private network namespace needs the sandbox and a root supervisor",
)
BUILD = AgentDefinition(type="builder", description="may write", read_only=False)
QUICK = DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=2.0)


class Counting:
    """A model that answers every call with `text` and the same usage, and counts calls."""

    def __init__(self, text: str = "from the model", usage: Usage | None = None) -> None:
        self.text = text
        self.usage = usage or Usage(input_tokens=11, output_tokens=7)
        self.calls: list[ModelCompleteParams] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.calls.append(params)
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content=self.text), usage=self.usage
        )


def texts(events: list[Event]) -> list[str]:
    return [
        e.data["text"]
        for e in events
        if isinstance(e, ChildEvent) and e.kind == "text" and not e.data.get("thought")
    ]


def post_messages(text: str = "hi") -> dict[str, Any]:
    """A step that asks the gateway for one Anthropic Messages turn with the agent's token."""
    return {
        "post": {
            "url": "$ANTHROPIC_BASE_URL/v1/messages",
            "headers": {"x-api-key": "$ANTHROPIC_API_KEY"},
            "body": {
                "model": "any",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": text}],
            },
        }
    }


async def run_acp(
    workspace: Path,
    steps: list[dict[str, Any]],
    *,
    isolation: str = "auto",
    model: Any = None,
    agent: str | AgentDefinition = "general",
    approve: Any = None,
    limits: Limits | None = None,
    config: ChildConfig | None = None,
    during: Callable[[Any, list[Event]], Awaitable[None]] | None = None,
) -> tuple[RunResult, list[Event]]:
    events: list[Event] = []
    cfg = config or ChildConfig(isolation=isolation, dispose=QUICK)
    async with Supervisor(cfg) as sup:
        with anyio.fail_after(90):
            handle = await sup.start(
                json.dumps(steps),
                agent=agent,
                workspace=workspace,
                model=model or Counting(),
                provider=ACP,
                approve=approve,
                limits=limits,
                on_event=events.append,
            )
            async with anyio.create_task_group() as tg:
                if during is not None:
                    tg.start_soon(during, handle, events)
                result = await handle.result()
                tg.cancel_scope.cancel()
    return result, events


@pytest.mark.parametrize("isolation", ["process", "auto"])
async def test_an_acp_agent_runs_under_the_supervisor_and_its_last_message_is_the_summary(
    tmp_path: Path, isolation: str
) -> None:
    result, events = await run_acp(
        tmp_path,
        [{"plan": ["look", "write"]}, {"say": "all done here"}],
        isolation=isolation,
    )
    assert result.success and result.status == "completed", result
    assert result.summary == "all done here"
    assert result.turn_count == 1 and result.run_id
    assert result.isolation is not None
    assert result.isolation.level == ("process" if isolation == "process" else probe_host().best)
    kinds = [e.kind for e in events if isinstance(e, ChildEvent)]
    assert kinds[0] == "started" and "step" in kinds
    started = [e for e in events if isinstance(e, RunStarted)]
    assert len(started) == 1 and str(AGENT) in started[0].argv


async def test_its_model_calls_go_through_the_gateway_to_the_runs_model_and_are_counted(
    tmp_path: Path,
) -> None:
    model = Counting("the model says hello", Usage(input_tokens=40, output_tokens=9))
    result, events = await run_acp(
        tmp_path, [post_messages("one"), post_messages("two"), {"say": "finished"}], model=model
    )
    assert result.success, result
    said = texts(events)
    assert sum("status 200" in t and "the model says hello" in t for t in said) == 2, said
    assert [c.messages[-1].content for c in model.calls] == ["one", "two"]
    # The parent's own count: the broker brokered both calls for this run.
    assert result.usage == Usage(input_tokens=80, output_tokens=18)
    assert result.iteration_count == 2


async def test_the_real_key_never_reaches_the_agent_only_its_capability_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = "sk-ant-canary-" + os.urandom(8).hex()
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary)
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    # Even a config that passes the key through by name does not hand it to a foreign agent.
    cfg = ChildConfig(pass_env=("ANTHROPIC_API_KEY", "OPENAI_API_KEY"), dispose=QUICK)
    result, _ = await run_acp(tmp_path, [{"environ": True}], config=cfg)
    assert result.success, result
    env = json.loads(result.summary)
    assert canary not in json.dumps(env)
    assert env["ANTHROPIC_API_KEY"].startswith("tether-cap-")
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"]
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["HOME"] != os.environ.get("HOME")  # a private home, not the user's


async def test_a_token_budget_stops_the_agents_model_calls_and_the_run_is_budget_exhausted(
    tmp_path: Path,
) -> None:
    model = Counting(usage=Usage(input_tokens=60, output_tokens=10))
    agent = AgentDefinition(type="general", description="g", token_budget=50)
    result, _ = await run_acp(
        tmp_path,
        [post_messages("one"), post_messages("two"), {"say": "should not get here"}],
        model=model,
        agent=agent,
    )
    assert not result.success and result.failure is not None
    assert result.failure.kind == "budget_exhausted", result
    assert len(model.calls) == 1  # the second call was refused before the model was asked
    assert result.usage == Usage(input_tokens=60, output_tokens=10)


async def test_cancel_sends_session_cancel_and_the_run_ends_aborted(tmp_path: Path) -> None:
    async def cancel_on_wait(handle: Any, events: list[Event]) -> None:
        while "waiting" not in texts(events):
            await anyio.sleep(0.02)
        await handle.cancel("enough")

    result, _ = await run_acp(
        tmp_path, [{"say": "waiting"}, {"wait": 60}, {"say": "never"}], during=cancel_on_wait
    )
    assert result.status == "aborted" and not result.success
    assert result.failure is not None and result.failure.kind == "cancelled"
    assert result.summary == "waiting"


async def test_a_mutating_permission_in_explore_mode_is_refused_without_asking_the_policy(
    tmp_path: Path,
) -> None:
    asked: list[ToolApproveParams] = []

    def policy(params: ToolApproveParams) -> ToolApproveResult:
        asked.append(params)
        return ToolApproveResult(allow=True)

    agent = AgentDefinition(type="general", description="g", read_only=True)
    result, events = await run_acp(
        tmp_path,
        [
            {"ask": {"id": "e1", "title": "edit a file", "kind": "edit"}},
            {"ask": {"id": "r1", "title": "read a file", "kind": "read"}},
        ],
        agent=agent,
        approve=policy,
    )
    assert result.success, result
    said = texts(events)
    assert "permission e1: no" in said and "permission r1: yes" in said
    assert [p.tool for p in asked] == ["read"]  # only the read was put to the policy


async def test_a_crash_mid_prompt_is_a_failed_run_with_the_exit_status(tmp_path: Path) -> None:
    result, events = await run_acp(tmp_path, [{"say": "working"}, {"crash": 3}])
    assert not result.success and result.status == "error"
    assert result.failure is not None and result.failure.kind == "exit_nonzero", result
    assert result.failure.exit_code == 3
    assert "working" in texts(events)


async def test_an_fs_write_outside_the_workspace_is_refused_and_one_inside_is_an_artifact(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside.txt"
    result, events = await run_acp(
        ws,
        [
            {"write": {"path": str(outside), "content": "escape"}},
            {"write": {"path": str(ws / "in.txt"), "content": "fine"}},
        ],
        agent=BUILD,
    )
    assert result.success, result
    assert not outside.exists()
    assert (ws / "in.txt").read_text() == "fine"
    said = texts(events)
    assert any(t.startswith(f"write {outside} refused") for t in said), said
    assert [a.path for a in result.artifacts] == [str(ws / "in.txt")]


async def test_an_agent_that_ignores_eof_and_sigterm_is_killed_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    result, _ = await run_acp(
        tmp_path, [{"ignore_eof": True}, {"stop": "refusal"}], isolation="process"
    )
    assert result.failure is not None and result.failure.kind == "agent_error"
    assert "refusal" in result.message
    # No `shutdown` rung for an ACP agent: closing stdin, then SIGTERM, then SIGKILL.
    assert result.failure.rung == "sigkill"


async def test_an_agent_that_exits_on_eof_needs_only_the_first_rung(tmp_path: Path) -> None:
    # The EOF grace is long: an interpreter's exit can take longer than QUICK's half second on
    # a loaded host (2 runs in 4 reached SIGTERM there). An agent that ignored its EOF would
    # still reach the SIGTERM rung, only later.
    patient = ChildConfig(dispose=DisposePolicy(shutdown=0.5, eof=30.0, term=0.5, kill=2.0))
    result, _ = await run_acp(tmp_path, [{"stop": "refusal"}], config=patient)
    assert result.failure is not None and result.failure.rung in ("none", "exit")


async def test_a_missing_agent_command_is_a_spawn_failure(tmp_path: Path) -> None:
    async with Supervisor() as sup:
        result = await sup.run(
            "[]", workspace=tmp_path, model=Counting(), provider="acp:/nonexistent/agent"
        )
    assert result.failure is not None and result.failure.kind == "spawn_failed"


async def test_acp_without_a_command_is_bad_usage_before_anything_runs(tmp_path: Path) -> None:
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match="needs the ACP agent's command"):
            await sup.start("x", workspace=tmp_path, provider="acp")


# --- under the sandbox: the gateway and nothing else -----------------------------------------


@needs_netns
async def test_a_sandboxed_agent_reaches_the_gateway_and_nothing_else(tmp_path: Path) -> None:
    outside = socket.create_server(("127.0.0.1", 0))
    outside.setblocking(False)
    port = outside.getsockname()[1]
    model = Counting("gateway answers")
    try:
        result, events = await run_acp(
            tmp_path,
            [
                post_messages("through the gateway"),
                {"connect": ["127.0.0.1", port]},
                {"connect": ["10.255.255.1", 80]},
                {"unix_socket": True},
            ],
            model=model,
            isolation="sandbox",
        )
        with pytest.raises(BlockingIOError):
            outside.accept()  # the listener outside the agent's namespace heard nothing
    finally:
        outside.close()
    assert result.success, result
    said = texts(events)
    assert any("status 200" in t and "gateway answers" in t for t in said), said
    assert f"connect 127.0.0.1:{port}: ECONNREFUSED" in said or any(
        t.startswith(f"connect 127.0.0.1:{port}: E") for t in said
    ), said
    assert any(t.startswith("connect 10.255.255.1:80: E") for t in said), said
    assert "unix socket: EACCES" in said
    assert len(model.calls) == 1


@pytest.mark.skipif(not SANDBOX, reason="the sandbox is not available here")
@pytest.mark.parametrize("read_only", [True, False])
async def test_under_the_sandbox_an_explore_mode_agent_cannot_write_the_workspace_itself(
    tmp_path: Path, read_only: bool
) -> None:
    agent = AgentDefinition(type="general", description="g", read_only=read_only)
    target = tmp_path / "own.txt"
    result, events = await run_acp(
        tmp_path,
        [{"own_write": {"path": str(target), "content": "x"}}],
        agent=agent,
        isolation="sandbox",
    )
    assert result.success, result
    # The agent's own tools write without asking the client: only the sandbox can refuse.
    if read_only:
        # EROFS as root (the workspace mount is read-only), EACCES otherwise (Landlock).
        assert texts(events) in ([f"own write {target}: {e}"] for e in ("EROFS", "EACCES"))
        assert not target.exists()
    else:
        assert texts(events) == [f"own write {target}: ok"]
        assert target.read_text() == "x"


async def test_the_gateway_is_one_per_supervisor_and_each_runs_token_dies_with_the_run(
    tmp_path: Path,
) -> None:
    import httpx

    async with Supervisor(ChildConfig(isolation="process", dispose=QUICK)) as sup:
        result = await sup.run(
            json.dumps([{"environ": True}]), workspace=tmp_path, model=Counting(), provider=ACP
        )
        assert result.success, result
        gateway = await sup.gateway()
        assert gateway is await sup.gateway()
        token = json.loads(result.summary)["ANTHROPIC_API_KEY"]
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient() as client:
            got = await client.post(
                f"{gateway.base_url}/v1/messages", json=body, headers={"x-api-key": token}
            )
        assert got.status_code == 401  # revoked when the run ended
        address = gateway.address
    assert address is not None
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=2).close()  # closed with the supervisor


async def test_an_agent_past_its_wall_clock_is_a_timeout(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        result, _ = await run_acp(
            tmp_path, [{"say": "slow"}, {"hang": 60}], limits=Limits(wall=1.5)
        )
    assert result.failure is not None and result.failure.kind == "timeout", result
    assert result.failure.limit == "wall=1.5s"


async def test_an_agent_that_dies_while_its_child_holds_its_stdout_ends_at_once(
    tmp_path: Path,
) -> None:
    import time

    started = time.monotonic()
    result, events = await run_acp(tmp_path, [{"sleeper": True}, {"crash": 5}])
    assert time.monotonic() - started < 20
    assert "sleeper started" in texts(events)
    assert result.failure is not None and result.failure.kind == "exit_nonzero", result
    assert result.failure.exit_code == 5
    # The sleeper that held the pipe was swept with the tree (the reaper checks nothing is
    # left).
