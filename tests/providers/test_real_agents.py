"""Real ACP agents that are not Python, keyless, end to end: each runs in a private network
namespace whose only way out is the model gateway (a socket made inside it), with a capability
token for an API key, driven by the ACP driver, a scripted provider behind the gateway.

- `@zed-industries/claude-agent-acp` from the npm registry (installed by scripts/acp-agents,
  which scripts/test runs; skipped with the reason when it is not installed);
- the dependency-free Node agent in examples/acp-agent/, which calls the OpenAI endpoint.

Each is also run as a provider of a `Supervisor` (the last two tests): spawned through tether's
own seam at the default isolation level, its model calls brokered for the run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from agent_process import isolated, tree

from tether.parent import Limits, Supervisor
from tether.parent.gateway import Gateway, Grant
from tether.parent.process.isolation import probe_host
from tether.parent.providers.acp import AcpDriver, AcpLimits, AcpOutcome, AcpTask
from tether.parent.providers.acp_provider import AcpProvider
from tether.parent.run.events import ChildEvent, Event
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolApproveParams,
    ToolApproveResult,
    ToolCall,
    Usage,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).parent.parent.parent
NODE_AGENT = ROOT / "examples" / "acp-agent" / "agent.js"
AGENTS = Path(
    os.environ.get("TETHER_ACP_AGENTS")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tether" / "acp-agents"
)
CLAUDE_ACP = AGENTS / "node_modules" / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js"
NODE = shutil.which("node")

needs_node = pytest.mark.skipif(NODE is None, reason="Node.js is not installed")
needs_claude_acp = pytest.mark.skipif(
    NODE is None or not CLAUDE_ACP.exists(),
    reason=f"@zed-industries/claude-agent-acp is not installed in {AGENTS} (scripts/acp-agents)",
)


class AgentScript:
    """Answers an agent's main-loop calls (the ones that offer tools) from a list of turns,
    and its side calls (no tools: titles, summaries) with a short fixed text."""

    def __init__(self, *turns: ModelCompleteResult) -> None:
        self.turns = list(turns)
        self.main_calls: list[ModelCompleteParams] = []
        self.side_calls = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        if not params.tools:
            self.side_calls += 1
            return answer("ok", Usage(input_tokens=3, output_tokens=1))
        self.main_calls.append(params)
        return self.turns[min(len(self.main_calls), len(self.turns)) - 1]


def answer(text: str, usage: Usage, *calls: ToolCall) -> ModelCompleteResult:
    return ModelCompleteResult(
        message=ChatMessage(role="assistant", content=text, tool_calls=list(calls)),
        usage=usage,
        stop_reason="tool_use" if calls else "end_turn",
    )


def base_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }


async def drive(
    gateway: Gateway,
    grant: Grant,
    argv: list[str],
    env: dict[str, str],
    task: AcpTask,
    *,
    url_env: tuple[str, ...],
    approve: object = None,
) -> tuple[AcpOutcome, list[ChildEvent], list[int]]:
    events: list[ChildEvent] = []
    async with isolated(
        gateway, grant, argv, env=env, url_env=url_env, cwd=task.workspace
    ) as agent:
        assert agent.process.stdin is not None and agent.process.stdout is not None
        driver = AcpDriver(
            agent.process.stdin,
            agent.process.stdout,
            task,
            on_event=events.append,
            meter=grant,
            approve=approve,  # type: ignore[arg-type]
            limits=AcpLimits(wall=120, handshake=60, idle=60),
        )
        outcome = await driver.run()
        pids = [p.pid for p in tree(agent.pid)]
    return outcome, events, pids


@needs_claude_acp
async def test_claude_agent_acp_runs_keyless_through_the_gateway(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    script = AgentScript(
        answer(
            "Writing the file.",
            Usage(input_tokens=100, output_tokens=20),
            ToolCall(
                id="toolu_01",
                name="Write",
                arguments={"file_path": str(ws / "hello.txt"), "content": "hi from tether\n"},
            ),
        ),
        answer("Wrote hello.txt.", Usage(input_tokens=150, output_tokens=10)),
    )
    ledger: list[Usage] = []
    async with Gateway() as gateway:
        grant = gateway.grant("run-claude", script, on_usage=lambda _g, u: ledger.append(u))
        env = {
            **base_env(home),
            "ANTHROPIC_API_KEY": grant.token,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        outcome, events, pids = await drive(
            gateway,
            grant,
            [NODE or "node", str(CLAUDE_ACP)],
            env,
            AcpTask("run-claude", "Write hello.txt saying hi.", ws),
            url_env=("ANTHROPIC_BASE_URL",),
        )
    result = outcome.result()
    assert result.success and result.status == "completed", (result, outcome.observed)
    assert result.summary == "Wrote hello.txt."
    assert (ws / "hello.txt").read_text() == "hi from tether\n"
    assert outcome.agent["name"] == "@zed-industries/claude-agent-acp"
    # Every model call the agent made reached the gateway with its token and was metered.
    assert len(script.main_calls) == 2
    assert grant.calls == len(script.main_calls) + script.side_calls == len(ledger)
    assert result.usage == grant.usage
    assert result.usage.input_tokens == 250 + 3 * script.side_calls
    assert result.iteration_count == grant.calls
    tool_calls = [e for e in events if e.kind == "tool_call"]
    assert [e.data["kind"] for e in tool_calls] == ["edit"]
    assert any(e.kind == "tool_result" and not e.data["isError"] for e in events)
    # The tool result went back to the model in the next turn.
    assert any(m.role == "tool" and "hello.txt" in m.content for m in script.main_calls[1].messages)
    assert len(pids) >= 2  # the adapter and the CLI it runs


@needs_claude_acp
async def test_claude_agent_acp_asks_before_a_command_and_explore_mode_refuses_it(
    tmp_path: Path,
) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    script = AgentScript(
        answer(
            "Running it.",
            Usage(input_tokens=10, output_tokens=5),
            ToolCall(
                id="toolu_02",
                name="Bash",
                arguments={"command": "touch pwned", "description": "Create a file"},
            ),
        ),
        answer("It was refused.", Usage(input_tokens=10, output_tokens=5)),
    )
    asked: list[ToolApproveParams] = []

    def policy(params: ToolApproveParams) -> ToolApproveResult:
        asked.append(params)
        return ToolApproveResult(allow=True)

    async with Gateway() as gateway:
        grant = gateway.grant("run-explore", script)
        env = {
            **base_env(home),
            "ANTHROPIC_API_KEY": grant.token,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        outcome, _, _ = await drive(
            gateway,
            grant,
            [NODE or "node", str(CLAUDE_ACP)],
            env,
            AcpTask("run-explore", "Create a file named pwned.", ws, read_only=True),
            url_env=("ANTHROPIC_BASE_URL",),
            approve=policy,
        )
    result = outcome.result()
    assert result.success, (result, outcome.observed)
    assert not (ws / "pwned").exists()
    assert asked == []  # refused in explore mode without asking the policy
    assert any("execute" in r for r in outcome.refusals), outcome.refusals
    assert any(
        m.role == "tool" and m.tool_call_id == "toolu_02" for m in script.main_calls[1].messages
    )


@needs_claude_acp
async def test_claude_agent_acp_surfaces_a_spent_budget_and_the_run_says_so(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    script = AgentScript(
        answer(
            "Writing.",
            Usage(input_tokens=100, output_tokens=20),
            ToolCall(
                id="toolu_03",
                name="Write",
                arguments={"file_path": str(ws / "a.txt"), "content": "a"},
            ),
        ),
        answer("never reached", Usage(input_tokens=1, output_tokens=1)),
    )
    async with Gateway() as gateway:
        grant = gateway.grant("run-budget", script, budget=50)
        env = {
            **base_env(home),
            "ANTHROPIC_API_KEY": grant.token,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        outcome, _, _ = await drive(
            gateway,
            grant,
            [NODE or "node", str(CLAUDE_ACP)],
            env,
            AcpTask("run-budget", "Write a.txt.", ws),
            url_env=("ANTHROPIC_BASE_URL",),
        )
    result = outcome.result()
    assert not result.success and result.failure is not None
    assert result.failure.kind == "budget_exhausted", result
    assert "402" in result.message and "budget is spent (" in result.message
    assert len(script.main_calls) == 1  # the second turn was refused, not answered
    assert grant.refused >= 1 and grant.calls == 1 + script.side_calls
    assert result.usage == grant.usage and grant.usage.input_tokens >= 100


@needs_node
async def test_a_node_acp_agent_calls_the_openai_endpoint_and_writes_through_the_parent(
    tmp_path: Path,
) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    script = AgentScript(
        answer(
            "Saving.",
            Usage(input_tokens=30, output_tokens=8),
            ToolCall(
                id="call_1",
                name="write_file",
                arguments={"path": str(ws / "notes.md"), "content": "# notes\n"},
            ),
            ToolCall(
                id="call_2",
                name="write_file",
                arguments={"path": "/etc/tether-escape", "content": "x"},
            ),
        ),
        answer("Saved notes.md.", Usage(input_tokens=40, output_tokens=6)),
    )
    async with Gateway() as gateway:
        grant = gateway.grant("run-node", script)
        env = {**base_env(home), "OPENAI_API_KEY": grant.token}
        outcome, events, _ = await drive(
            gateway,
            grant,
            [NODE or "node", str(NODE_AGENT)],
            env,
            AcpTask("run-node", "Save a notes file.", ws),
            url_env=("OPENAI_BASE_URL=/v1",),
        )
    result = outcome.result()
    assert result.success, (result, outcome.observed)
    assert result.summary == "Saved notes.md."
    assert (ws / "notes.md").read_text() == "# notes\n"
    assert not Path("/etc/tether-escape").exists()
    assert [a.path for a in result.artifacts] == [str(ws / "notes.md")]
    assert result.usage == Usage(input_tokens=70, output_tokens=14) == grant.usage
    results = [e.data for e in events if e.kind == "tool_result"]
    assert [r["isError"] for r in results] == [False, True]
    assert "outside the workspace" in results[1]["content"]
    # The refusal went back to the model as the tool's result.
    second = script.main_calls[1].messages
    assert any(m.role == "tool" and "outside the workspace" in m.content for m in second)


# --- the same agents as providers of a supervisor --------------------------------------------


BUILD = AgentDefinition(type="builder", description="may write", read_only=False, max_iterations=50)


@needs_claude_acp
async def test_claude_agent_acp_runs_as_a_provider_of_the_supervisor_keyless(
    tmp_path: Path,
) -> None:
    """Spawned through tether's own seam at the default isolation level (under the sandbox as
    root: a private network namespace whose one listener is the gateway)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = AgentScript(
        answer(
            "Writing the file.",
            Usage(input_tokens=100, output_tokens=20),
            ToolCall(
                id="toolu_01",
                name="Write",
                arguments={"file_path": str(ws / "hello.txt"), "content": "hi from tether\n"},
            ),
        ),
        answer("Wrote hello.txt.", Usage(input_tokens=150, output_tokens=10)),
    )
    events: list[Event] = []
    async with Supervisor() as sup:
        sup.providers.register(AcpProvider("claude", [NODE or "node", str(CLAUDE_ACP)]))
        result = await sup.run(
            "Write hello.txt saying hi.",
            workspace=ws,
            model=script,
            provider="claude",
            agent=BUILD,
            limits=Limits(wall=120),
            on_event=events.append,
        )
    assert result.success and result.summary == "Wrote hello.txt.", result
    assert (ws / "hello.txt").read_text() == "hi from tether\n"
    assert result.isolation is not None and result.isolation.level == probe_host().best
    # Every call the agent made went through the gateway to the run's model, and the
    # parent counted each one.
    calls = len(script.main_calls) + script.side_calls
    assert len(script.main_calls) == 2 and result.iteration_count == calls
    assert result.usage.input_tokens == 250 + 3 * script.side_calls
    started = [e for e in events if isinstance(e, ChildEvent) and e.kind == "started"]
    assert started[0].data["agent"]["name"] == "@zed-industries/claude-agent-acp"


@needs_node
async def test_the_node_acp_agent_runs_as_a_provider_of_the_supervisor(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = AgentScript(
        answer(
            "Saving.",
            Usage(input_tokens=30, output_tokens=8),
            ToolCall(
                id="call_1",
                name="write_file",
                arguments={"path": str(ws / "notes.md"), "content": "# notes\n"},
            ),
        ),
        answer("Saved notes.md.", Usage(input_tokens=40, output_tokens=6)),
    )
    async with Supervisor() as sup:
        result = await sup.run(
            "Save a notes file.",
            workspace=ws,
            model=script,
            provider=f"acp:{NODE} {NODE_AGENT}",
            agent=BUILD,
            limits=Limits(wall=120),
        )
    assert result.success and result.summary == "Saved notes.md.", result
    assert (ws / "notes.md").read_text() == "# notes\n"
    assert [a.path for a in result.artifacts] == [str(ws / "notes.md")]
    assert result.usage == Usage(input_tokens=70, output_tokens=14)
