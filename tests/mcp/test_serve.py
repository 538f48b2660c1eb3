"""`tether mcp` end to end: a real server process driven by the MCP SDK's own stdio client, its
sub-agents real tether children on scripted models (or a local OpenAI-compatible server)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import anyio
import jsonschema
import msgspec
import pytest
from harness import (
    CRASH,
    SLOW,
    WAIT,
    Progress,
    gone,
    ledger,
    marked,
    model_script,
    serve,
    sub_agents,
    task_args,
    tree,
    workspace,
)
from mcp.shared.exceptions import MCPError

from tether.parent.delegation import TaskOutput, load_registry, task_tool
from tether.parent.mcp_server.task import output_schema

pytestmark = pytest.mark.anyio

FIGURES = r"\(step (\d+), ([\d.]+) s, last tool (\S+), (\d+) tokens\)"


def base_args(tmp_path: Path, *more: str) -> list[str]:
    ws = workspace(tmp_path)
    script = model_script(tmp_path / "model.json")
    return ["--model", f"scripted:{script}", "--workspace", str(ws), *more]


AGENTS = """
[[agent]]
type = "researcher"
description = "Finds and summarises prior work on a question."

[[agent]]
type = "explorer"
"""


async def test_the_task_tool_is_listed_with_the_task_tools_schema_for_the_definitions(
    tmp_path: Path,
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS)
    async with serve(tmp_path, *base_args(tmp_path, "--agents", str(agents))) as server:
        listed = (await server.session.list_tools()).tools
        instructions = server.init.instructions or ""
        assert server.init.server_info.name == "tether"
    [task] = listed
    expected = task_tool(load_registry(agents))
    assert expected is not None
    # The listed description and input schema are the task tool's JSON Schema, taken apart.
    document = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": task.name,
        "description": task.description,
        **task.input_schema,
    }
    assert document == expected.json_schema()
    assert task.input_schema["properties"]["subagent_type"]["enum"] == ["researcher", "explorer"]
    assert task.input_schema["properties"]["description"]["maxLength"] == 80
    assert task.output_schema == output_schema()
    assert task.annotations is not None and task.annotations.read_only_hint is False
    assert "researcher (read-only), explorer (read-only)" in instructions


async def test_a_task_call_runs_a_sub_agent_and_answers_its_task_output_as_structured_content(
    tmp_path: Path,
) -> None:
    book = tmp_path / "ledger.jsonl"
    async with serve(tmp_path, *base_args(tmp_path, "--ledger", str(book))) as server:
        result = await server.session.call_tool("task", task_args())
    assert not result.is_error
    out = msgspec.convert(result.structured_content, TaskOutput)
    assert (out.status, out.summary, out.steps) == ("completed", "found the notes", 2)
    assert [a.path for a in out.artifacts] == [str(tmp_path / "ws" / "notes.md")]
    jsonschema.validate(result.structured_content, output_schema())
    [text] = result.content
    assert text.type == "text"
    assert text.text.startswith("completed (sa-1, 2 steps): found the notes")
    assert f"artifact: {tmp_path / 'ws' / 'notes.md'} (file," in text.text
    # The run is recorded, its usage as the server's broker counted it.
    [record] = ledger(book)
    assert (record["subagentId"], record["status"], record["toolCallId"]) == (
        "sa-1",
        "completed",
        "mcp-1",
    )
    assert record["usage"] == {"inputTokens": 220, "outputTokens": 22}


async def test_with_a_progress_token_each_step_of_the_sub_agent_arrives_as_progress(
    tmp_path: Path,
) -> None:
    progress = Progress()
    async with serve(tmp_path, *base_args(tmp_path)) as server:
        result = await server.session.call_tool("task", task_args(), progress_callback=progress)
    assert not result.is_error
    messages = progress.messages
    who = "sa-1 explorer 'find the TODO notes'"
    assert messages[0] == f"{who}: started (task, read-only)"
    assert messages[-1] == f"{who}: completed"
    numbers = [p for p, _, _ in progress.seen]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    steps = [m for m in messages if ": next step (" in m]
    figures = [re.search(FIGURES, m) for m in steps]
    assert [int(f.group(1)) for f in figures if f] == [1, 2]
    [listing] = [m for m in messages if ": calls list_dir (" in m]
    got = re.search(FIGURES, listing)
    assert got is not None and got.group(3) == "list_dir"
    [finish] = [m for m in messages if ": calls complete (" in m]
    got = re.search(FIGURES, finish)
    assert got is not None
    # After the second turn the broker has counted both turns' tokens; time went by.
    assert (int(got.group(1)), int(got.group(4))) == (2, 242)
    assert float(got.group(2)) > 0


async def test_a_call_over_the_cap_queues_saying_so_and_runs_when_a_slot_frees(
    tmp_path: Path,
) -> None:
    first, second = Progress(), Progress()
    slow = anyio.CancelScope()
    answers = []
    async with (
        serve(tmp_path, *base_args(tmp_path, "--max-concurrent", "1")) as server,
        anyio.create_task_group() as tg,
    ):

        async def occupy() -> None:
            with slow:
                args = task_args(description="look a", prompt=f"Look. {SLOW}")
                await server.session.call_tool("task", args, progress_callback=first)

        async def wait_in_line() -> None:
            args = task_args(description="look b")
            answers.append(await server.session.call_tool("task", args, progress_callback=second))

        tg.start_soon(occupy)
        await first.wait_for(r": next step \(step 1,")
        tg.start_soon(wait_in_line)
        await second.wait_for("queued")
        slow.cancel()  # the client gives up on the first call: its slot frees
    [answer] = answers
    assert not answer.is_error
    assert second.messages[:2] == [
        "sa-2 explorer 'look b': queued (position 1, waiting for a slot)",
        "sa-2 explorer 'look b': started (task, read-only)",
    ]
    assert second.messages[-1] == "sa-2 explorer 'look b': completed"
    assert all("sa-2" not in m for m in first.messages)  # each call hears of its own sub-agents


async def test_invalid_arguments_are_an_error_result_naming_each_and_nothing_runs(
    tmp_path: Path,
) -> None:
    book = tmp_path / "ledger.jsonl"
    async with serve(tmp_path, *base_args(tmp_path, "--ledger", str(book))) as server:
        bad = await server.session.call_tool(
            "task", task_args(subagent_type="wizard", description="x" * 81)
        )
        missing = await server.session.call_tool("task", {"subagent_type": "explorer"})
        with pytest.raises(MCPError, match="unknown tool 'teleport'; this server offers: task"):
            await server.session.call_tool("teleport", {})
        descendants = sub_agents(server.pid)
    assert bad.is_error
    out = msgspec.convert(bad.structured_content, TaskOutput)
    assert (out.status, out.error) == ("error", "invalid_arguments")
    assert {p.argument: p.problem for p in out.problems} == {
        "subagent_type": 'unknown sub-agent type "wizard"; available: explorer, reviewer, '
        "verifier, tester, general",
        "description": "81 characters, at most 80 allowed (a short label; put the task itself "
        "in `prompt`)",
    }
    assert "subagent_type" in bad.content[0].text and "81 characters" in bad.content[0].text
    assert missing.is_error
    assert "description: missing (required)" in missing.content[0].text
    assert "prompt: missing (required)" in missing.content[0].text
    assert descendants == [] and ledger(book) == []


async def test_a_crashing_sub_agent_is_an_error_result_never_a_protocol_error(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, *base_args(tmp_path)) as server:
        result = await server.session.call_tool(
            "task", task_args(prompt=f"Run it. {CRASH}", readOnly=False)
        )
        after = await server.session.call_tool("task", task_args())
    assert result.is_error
    out = msgspec.convert(result.structured_content, TaskOutput)
    assert (out.status, out.failure) == ("crashed", "crashed")
    assert "SIGSEGV" in out.message
    assert result.content[0].text.startswith("crashed (sa-1, ")
    assert not after.is_error  # the server goes on serving


async def test_a_cancelled_task_call_aborts_its_sub_agent_and_disposes_of_the_child(
    tmp_path: Path,
) -> None:
    book = tmp_path / "ledger.jsonl"
    progress = Progress()
    async with serve(tmp_path, *base_args(tmp_path, "--ledger", str(book))) as server:
        children: list[int] = []
        with anyio.CancelScope() as scope:

            async def cancel_once_running() -> None:
                await progress.wait_for(r": next step \(step 1,")
                children.extend(sub_agents(server.pid))
                scope.cancel()  # the SDK sends notifications/cancelled for the request

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_once_running)
                await server.session.call_tool(
                    "task", task_args(prompt=f"Look. {SLOW}"), progress_callback=progress
                )
        assert scope.cancelled_caught
        assert children, "the sub-agent's child was never seen"
        assert await gone(children) == []
        with anyio.fail_after(WAIT):
            while not ledger(book):
                await anyio.sleep(0.05)
        after = await server.session.call_tool("task", task_args())
    [aborted, completed] = ledger(book)
    assert (aborted["status"], aborted["failure"]) == ("aborted", "cancelled")
    assert completed["status"] == "completed" and not after.is_error


async def test_with_no_definitions_there_is_no_task_tool_and_the_instructions_say_why(
    tmp_path: Path,
) -> None:
    agents = tmp_path / "none.toml"
    agents.write_text("# no [[agent]] tables\n")
    async with serve(tmp_path, "--agents", str(agents), "--workspace", str(tmp_path)) as server:
        listed = (await server.session.list_tools()).tools
        with pytest.raises(MCPError, match="unknown tool 'task'; this server offers: none"):
            await server.session.call_tool("task", task_args())
    assert listed == []
    instructions = server.init.instructions or ""
    assert "offers no task tool" in instructions and str(agents) in instructions


async def test_a_client_that_disconnects_mid_run_leaves_no_process_behind(tmp_path: Path) -> None:
    progress = Progress()
    seen: list[int] = []
    server_pid = 0
    async with serve(tmp_path, *base_args(tmp_path)) as server:
        server_pid = server.pid
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await server.session.call_tool(
                    "task", task_args(prompt=f"Look. {SLOW}"), progress_callback=progress
                )

            tg.start_soon(call)
            await progress.wait_for(r": next step \(step 1,")
            seen = [p.pid for p in tree(server.pid)]
            assert sub_agents(server.pid)
            tg.cancel_scope.cancel()
        # Leaving the client closes the server's stdin (and, after a grace, signals it).
    assert await gone(seen) == []
    assert marked(server_pid) == []
    assert "stopped; 1 sub-agent run(s), every child disposed" in server.log()


async def test_sigterm_mid_run_disposes_of_every_child_and_stops_the_server(
    tmp_path: Path,
) -> None:
    progress = Progress()
    async with serve(tmp_path, *base_args(tmp_path)) as server:
        with anyio.CancelScope() as scope:

            async def terminate_once_running() -> None:
                await progress.wait_for(r": next step \(step 1,")
                seen.extend(p.pid for p in tree(server.pid))
                assert sub_agents(server.pid)
                os.kill(server.pid, signal.SIGTERM)

            seen: list[int] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(terminate_once_running)
                with pytest.raises(MCPError, match="Connection closed"):
                    await server.session.call_tool(
                        "task", task_args(prompt=f"Look. {SLOW}"), progress_callback=progress
                    )
                assert await gone(seen) == []
        assert not scope.cancelled_caught
    log = server.log()
    assert "SIGTERM: stopping; disposing of every child" in log
    assert "stopped; 1 sub-agent run(s), every child disposed" in log
    assert marked(server.pid) == []


ACP_AGENT = Path(__file__).resolve().parents[1] / "children" / "acp_agent.py"


async def test_a_definition_naming_a_provider_table_of_the_file_runs_on_it(
    tmp_path: Path,
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text(
        f"""
[[provider]]
name = "here"
kind = "acp"
command = ["{sys.executable}", "{ACP_AGENT}"]
summary = "the test agent"

[[agent]]
type = "foreign"
description = "An ACP agent."
provider = "here"
readOnly = true
"""
    )
    steps = json.dumps([{"say": "from the table"}])
    args = {"subagent_type": "foreign", "description": "ask it", "prompt": steps}
    async with serve(tmp_path, *base_args(tmp_path, "--agents", str(agents))) as server:
        [task] = (await server.session.list_tools()).tools
        result = await server.session.call_tool("task", args)
    # spawn and the file's provider can run here: the client may choose (fork it cannot).
    assert task.input_schema["properties"]["agentType"]["enum"] == ["spawn", "here"]
    assert not result.is_error, result.content
    out = msgspec.convert(result.structured_content, TaskOutput)
    assert (out.status, out.summary) == ("completed", "from the table")
