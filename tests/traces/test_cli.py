"""The command line: `--trace DIR` on `tether run`, `orchestrate` and `mcp`; `tether trace
show` (a transcript stripped of control characters, or JSON) and `schema`; `tether replay`
(exit 0 when the replay reproduced the recording, 1 when it did not, 2 for bad usage)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tether.parent.trace.format import Header, encode
from tether.parent.trace.reader import read_trace
from tether.parent.trace.schema import render
from tether.protocol.messages import AgentDefinition

ROOT = Path(__file__).resolve().parents[2]
EXPLORER = ROOT / "examples" / "explorer.json"
ORCHESTRATE = ROOT / "examples" / "orchestrate.json"
HEADER = Header(
    run_id="run-1",
    wall=1.0,
    mono=1.0,
    tether_version="0",
    protocol_version=1,
    agent="orchestrator",
    definition=AgentDefinition(type="orchestrator"),
    prompt="p",
    workspace="/nowhere",
    provider="spawn",
)
HOSTILE = (
    '[{"text": "\\u001b]0;pwned\\u0007\\u001b[31mred\\u001b[0m and \\u202eevil",'
    ' "toolCalls": [{"name": "complete", "arguments": {"summary": "done \\u001b[2J"}}]}]'
)


def tether(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.parent.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_run_with_trace_writes_a_trace_that_show_prints_without_control_characters(
    workspace: Path, traces: Path, tmp_path: Path
) -> None:
    script = tmp_path / "hostile.json"
    script.write_text(HOSTILE)
    got = tether(
        "run",
        "Say hello.",
        "--model",
        f"scripted:{script}",
        "--workspace",
        str(workspace),
        "--trace",
        str(traces),
        "--json",
        "--quiet",
    )
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout)
    path = result["trace"]["path"]
    assert Path(path).parent == traces and result["trace"]["stopped"] is None
    shown = tether("trace", "show", path)
    assert shown.returncode == 0, shown.stderr
    assert f"run {result['runId']}: general" in shown.stdout
    assert "task: Say hello." in shown.stdout
    assert (
        "red and evil" in shown.stdout and "result (activation 0): completed: done" in shown.stdout
    )
    for bad in ("\x1b", "\x07", "\u202e"):
        assert bad not in shown.stdout
    as_json = json.loads(tether("trace", "show", path, "--json").stdout)
    [run] = as_json["runs"]
    assert run["header"]["runId"] == result["runId"] and as_json["subagents"] == []
    assert [ln["kind"] for ln in run["lines"]] == ["turn", "child_event", "child_event", "result"]
    assert run["lines"][0]["response"]["message"]["content"].startswith("\x1b]0;pwned")
    assert tether("trace", "schema").stdout == render()


def test_replay_reproduces_a_recorded_run_and_says_so_with_exit_0(
    workspace: Path, replay_workspace: Path, traces: Path
) -> None:
    got = tether(
        "run",
        "Report the TODO notes.",
        "--agent",
        "tester",
        "--model",
        f"scripted:{EXPLORER}",
        "--workspace",
        str(workspace),
        "--trace",
        str(traces),
        "--json",
        "--quiet",
    )
    assert got.returncode == 0, got.stderr
    path = json.loads(got.stdout)["trace"]["path"]
    fresh = replay_workspace.parent / "fresh"
    shutil.copytree(replay_workspace, fresh)
    again = tether("replay", path, "--workspace", str(replay_workspace), "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "replay: reproduced the recorded run" in again.stdout
    assert "completed: 2 TODOs, both in adjust()" in again.stdout
    kept = replay_workspace.parent / "replay-traces"
    as_json = tether(
        "replay", path, "--workspace", str(fresh), "--json", "--trace", str(kept), "--quiet"
    )
    assert as_json.returncode == 0, as_json.stderr
    out = json.loads(as_json.stdout)
    assert out["reproduced"] is True and out["differences"] == out["divergences"] == []
    assert Path(out["trace"]).parent == kept and read_trace(out["trace"]).runs[0].turns


def test_replay_in_a_workspace_that_changed_exits_1_naming_the_divergence(
    workspace: Path, replay_workspace: Path, traces: Path
) -> None:
    got = tether(
        "run",
        "Report the TODO notes.",
        "--agent",
        "explorer",
        "--model",
        f"scripted:{EXPLORER}",
        "--workspace",
        str(workspace),
        "--trace",
        str(traces),
        "--json",
        "--quiet",
    )
    path = json.loads(got.stdout)["trace"]["path"]
    (replay_workspace / "inventory.py").write_text("# rewritten\n")
    again = tether("replay", path, "--workspace", str(replay_workspace), "--quiet")
    assert again.returncode == 1, again.stdout + again.stderr
    assert "replay: did not reproduce the recorded run:" in again.stdout
    assert "left the recorded run" in again.stdout
    assert "the summary differs" in again.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["replay", "{file}"], "not a trace line"),
        (["replay", "{none}"], "cannot read trace"),
        (["trace", "show", "{file}"], "not a trace line"),
        (
            ["run", "x", "--model", "scripted:{file}", "--workspace", "{ws}", "--trace", "{ws}/t"],
            "lies in the run's workspace",
        ),
        (["replay", "{file}", "--workspace", "{none}"], "is not a directory"),
        (["replay", "{acp}"], "ran on provider 'acp', which runs an agent of its own"),
        (["replay", "{continuable}"], "ran continuable sub-agents, whose agent ids are new"),
    ],
)
def test_bad_usage_exits_2_with_the_reason(
    tmp_path: Path, workspace: Path, args: list[str], said: str
) -> None:
    file = tmp_path / "not-a-trace.jsonl"
    file.write_text('{"turns": []}\n')
    made = {}
    for name, changes in (
        ("acp", {"provider": "acp"}),
        ("continuable", {"orchestration": {"continuable": True, "definitions": []}}),
    ):
        made[name] = tmp_path / f"{name}.jsonl"
        made[name].write_bytes(encode(msgspec.structs.replace(HEADER, **changes)))
    filled = [a.format(file=file, none=tmp_path / "none", ws=workspace, **made) for a in args]
    got = tether(*filled)
    assert got.returncode == 2, got.stdout + got.stderr
    assert said in got.stderr


def test_an_orchestration_traced_from_the_cli_replays_with_its_sub_agents(
    workspace: Path, replay_workspace: Path, traces: Path
) -> None:
    got = tether(
        "orchestrate",
        "Fix it.",
        "--model",
        f"scripted:{ORCHESTRATE}",
        "--workspace",
        str(workspace),
        "--trace",
        str(traces),
        "--json",
        "--quiet",
        timeout=240,
    )
    assert got.returncode == 0, got.stderr
    root = json.loads(got.stdout)["result"]["trace"]["path"]
    assert len(list(traces.glob("*.jsonl"))) == 7  # the orchestrator and six sub-agent runs
    shown = tether("trace", "show", root).stdout
    assert shown.count("    " + str(traces)) == 6 and "sub-agent runs" in shown
    again = tether(
        "replay", root, "--workspace", str(replay_workspace), "--json", "--quiet", timeout=240
    )
    assert again.returncode == 0, again.stdout + again.stderr
    out = json.loads(again.stdout)
    assert out["reproduced"] and len(out["orchestration"]["ledger"]["subagents"]) == 6


@pytest.mark.anyio
async def test_mcp_with_trace_traces_each_sub_agent_it_runs(tmp_path: Path) -> None:
    from harness import model_script, serve, task_args, workspace

    ws = workspace(tmp_path)
    script = model_script(tmp_path / "model.json")
    traces = tmp_path / "traces"
    args = ["--model", f"scripted:{script}", "--workspace", str(ws), "--trace", str(traces)]
    async with serve(tmp_path, *args) as server:
        result = await server.session.call_tool("task", task_args())
    assert not result.is_error
    [file] = traces.glob("*.jsonl")
    [run] = read_trace(file).runs
    assert run.header.agent == "explorer" and run.header.labels["subagentId"] == "sa-1"
    assert run.result is not None and run.result.summary == "found the notes"
    assert [t.response is not None for t in run.turns] == [True, True]
