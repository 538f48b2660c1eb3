"""`tether orchestrate` and its live view: the outcome and the ledger on stdout (or JSON), a
nested view on a terminal, plain lines elsewhere, the model's and children's words cleaned."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from book import ORCHESTRATOR, call, complete, script, task, turn

from tether.parent.cli.live import LiveView, TreeState
from tether.parent.run.events import ChildEvent, RunFinished, RunStarted
from tether.parent.run.subagent_events import (
    SubagentCompleted,
    SubagentProgress,
    SubagentQueued,
    SubagentStarted,
)
from tether.protocol.messages import RunResult

TETHER = [sys.executable, "-m", "tether.parent.cli"]
HOSTILE_LABEL = "\x1b]0;pwned\x07\x1b[2Jlook \u202eA"


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TETHER, *args], capture_output=True, text=True, timeout=90, check=False)


def book(tmp_path: Path, *, orchestrator_ends: bool = True) -> Path:
    last = turn(complete("both explored")) if orchestrator_ends else turn()
    scripts = [
        script(
            ORCHESTRATOR,
            turn(
                task("c1", "explorer", HOSTILE_LABEL, "Find A."),
                task("c2", "explorer", "look B", "Find B."),
            ),
            last,
        ),
        script(
            "Role: explorer",
            turn(call("list_dir", path=".")),
            turn(complete("found it", "notes.md")),
        ),
    ]
    path = tmp_path / "book.json"
    path.write_text(json.dumps({"scripts": scripts}))
    (tmp_path / "notes.md").write_text("TODO\n")
    return path


def test_orchestrate_prints_the_outcome_and_the_ledger_and_plain_progress(
    tmp_path: Path,
) -> None:
    got = tether(
        "orchestrate", "Survey.", "--model", f"scripted:{book(tmp_path)}",
        "--workspace", str(tmp_path),
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    out = got.stdout
    assert "completed: both explored" in out
    assert "c2 explorer 'look B': completed (2 steps)" in out
    assert f"artifact {tmp_path / 'notes.md'}" in out
    assert "usage ledger:" in out and "total: 2 sub-agent run(s)" in out
    # stderr is not a terminal here: plain lines, nothing redrawn, every word cleaned.
    err = got.stderr
    assert "tether:   sa-2 explorer 'look B': started (task, read-only)" in err
    assert "sa-1 explorer 'look A': completed: found it" in err
    assert "\x1b" not in err + out and "\u202e" not in err + out


def test_orchestrate_json_holds_the_result_the_task_calls_and_the_ledger(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    got = tether(
        "orchestrate", "Survey.", "--model", f"scripted:{book(tmp_path)}",
        "--workspace", str(tmp_path), "--json", "--quiet", "--ledger", str(ledger),
        "--timeout", "60s", "--memory", "1G",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert got.stderr == ""
    data = json.loads(got.stdout)
    assert data["result"]["success"] and data["result"]["summary"] == "both explored"
    assert {t["toolCallId"]: t["output"]["status"] for t in data["tasks"]} == {
        "c1": "completed",
        "c2": "completed",
    }
    records = data["ledger"]["subagents"]
    assert sorted(r["toolCallId"] for r in records) == ["c1", "c2"]
    assert all(r["usage"]["inputTokens"] > 0 and r["steps"] == 2 for r in records)
    totals = data["ledger"]["totals"]
    assert totals["runs"] == 2
    assert totals["orchestrator"] == data["ledger"]["orchestrator"] == data["result"]["usage"]
    assert (
        totals["total"]["inputTokens"]
        == totals["subagents"]["inputTokens"] + (totals["orchestrator"]["inputTokens"])
    )
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert {line["record"] for line in lines} == {"subagent", "orchestrator"}


def test_an_orchestrator_that_fails_exits_1(tmp_path: Path) -> None:
    got = tether(
        "orchestrate", "Survey.", "--model", f"scripted:{book(tmp_path, orchestrator_ends=False)}",
        "--workspace", str(tmp_path), "--max-steps", "2", "--quiet",
    )  # fmt: skip
    assert got.returncode == 1, got.stderr
    assert "budget_exhausted" in got.stdout


def test_bad_usage_exits_2_before_anything_runs(tmp_path: Path) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text('[[agent]]\ntype = "a"\ndescription = "x"\nmaxIterations = 3\n')
    got = tether("orchestrate", "x", "--model", "scripted:/nonexistent", "--agents", str(agents))
    assert got.returncode == 2 and "maxSteps" in got.stderr
    got = tether("orchestrate", "x", "--model", f"scripted:{tmp_path / 'missing.json'}")
    assert got.returncode == 2 and "cannot read model script" in got.stderr
    got = tether("orchestrate", "x", "--model", "scripted:x", "--max-concurrent", "0")
    assert got.returncode == 2


def test_orchestrate_takes_the_same_limit_and_isolation_flags_as_run() -> None:
    run = tether("run", "--help").stdout
    orchestrate = tether("orchestrate", "--help").stdout
    for flag in ("--timeout", "--idle-timeout", "--memory", "--cpu", "--processes",
                 "--open-files", "--file-size", "--launcher", "--containment",
                 "--isolation"):  # fmt: skip
        assert flag in run and flag in orchestrate


# --- the view itself --------------------------------------------------------------------------


def _fold(state: TreeState) -> list[str]:
    lines: list[str] = []
    result = RunResult(success=True, status="completed", summary="ok")
    for t, ev in enumerate(
        [
            RunStarted("run-1", 42, ()),
            ChildEvent("run-1", 0, "step", {"iteration": 1}),
            ChildEvent("run-1", 1, "tool_call", {"name": "task"}),
            SubagentStarted("sa-1", "explorer", HOSTILE_LABEL, "c1", "task", True),
            SubagentQueued("sa-2", "tester", "write tests", "c2", 1, "slot", 1),
            SubagentProgress("sa-1", "explorer", "x", "tool_call", {}, 3, "grep", 1.0, 2048),
            ChildEvent("run-9", 0, "step", {"iteration": 7}),  # a sub-agent's own run
        ]
    ):
        lines += state.apply(ev, now=float(t))
    lines += state.apply(
        SubagentCompleted("sa-1", "explorer", "x", "c1", "task", False, "truncated", "timeout"),
        now=9.0,
    )
    lines += state.apply(RunFinished("run-1", result), now=10.0)
    return lines


def test_the_view_nests_each_sub_agent_under_the_orchestrator_with_its_figures() -> None:
    state = TreeState()
    state.tokens = lambda: 1500
    lines = _fold(state)
    assert "orchestrator run-1: started (pid 42)" in lines
    view = state.render(now=10.0, width=200)
    assert view[0].startswith("orchestrator run-1  completed  step 1  10.0s  last task  1.5k tok")
    sa1, sa2 = view[1], view[2]
    assert sa1.startswith("├─ sa-1 explorer") and "look A" in sa1
    assert "truncated" in sa1 and "step 3" in sa1 and "6.0s" in sa1 and "last grep" in sa1
    assert "2.0k tok" in sa1
    assert sa2.startswith("└─ sa-2 tester") and "queued #1" in sa2
    assert not any("\x1b" in line or "\u202e" in line for line in lines + view)
    assert all("step 7" not in line for line in lines)  # sub-agent runs come as subagent.*


def test_on_a_terminal_the_block_is_redrawn_in_place_and_elsewhere_never() -> None:
    tty, plain = io.StringIO(), io.StringIO()
    live, lines = LiveView(tty, terminal=True), LiveView(plain, terminal=False)
    for view in (live, lines):
        view(RunStarted("run-1", 42, ()))
        view(SubagentStarted("sa-1", "explorer", "look", "c1", "task", True))
        view.draw()
        view.draw()
    drawn = tty.getvalue()
    assert drawn.count("\x1b[2F\x1b[J") == 1  # the second draw replaced the first block
    assert drawn.count("└─ sa-1 explorer") == 2 and "tether:" not in drawn
    assert "\x1b" not in plain.getvalue()
    assert plain.getvalue().splitlines() == [
        "tether: orchestrator run-1: started (pid 42)",
        "tether:   sa-1 explorer 'look': started (task, read-only)",
    ]


def test_every_flag_the_doc_lists_is_one_tether_orchestrate_takes() -> None:
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "delegation.md").read_text()
    usage = doc[doc.index("tether orchestrate PROMPT --model M") :]
    usage = usage[: usage.index("```")]
    flags = set(re.findall(r"--[a-z][a-z-]+", usage))
    assert len(flags) > 15
    helped = tether("orchestrate", "--help").stdout
    assert [f for f in sorted(flags) if f not in helped] == []


def test_sigint_cancels_the_orchestration_prints_it_and_exits_130(tmp_path: Path) -> None:
    import signal

    scripts = [
        script(
            ORCHESTRATOR,
            turn(
                task("c1", "explorer", "hang one", "Find A."),
                task("c2", "explorer", "hang two", "Find B."),
            ),
        ),
        script("Role: explorer", turn(call("list_dir", path="."), delay=60)),
    ]
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"scripts": scripts}))
    proc = subprocess.Popen(
        [*TETHER, "orchestrate", "Go.", "--model", f"scripted:{path}",
         "--workspace", str(tmp_path), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stderr is not None
    started = 0
    while started < 2:  # each sub-agent is on its first model turn
        line = proc.stderr.readline()
        assert line, "tether ended before both sub-agents started"
        started += "': step 1" in line
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    data = json.loads(out)
    assert data["result"]["status"] == "aborted"
    assert sorted(r["status"] for r in data["ledger"]["subagents"]) == ["aborted", "aborted"]
    assert "cancelling the run" in err
    # The stop's receipt covers the tree: the orchestrator and both sub-agents, each on its
    # first model turn (a minute long), abandoned unbilled; nothing left.
    stop = data["result"]["stop"]
    assert (stop["reason"], stop["runs"], stop["processesLeft"]) == ("interrupted", 3, 0)
    assert (stop["turnsAfterStop"], stop["tokensAfterStop"], stop["turnsAbandoned"]) == (0, 0, 2)


def test_sigint_prints_the_orchestrations_stop_receipt_in_one_line(tmp_path: Path) -> None:
    import signal

    scripts = [
        script(ORCHESTRATOR, turn(task("c1", "explorer", "hang one", "Find A."))),
        script("Role: explorer", turn(call("list_dir", path="."), delay=60)),
    ]
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"scripts": scripts}))
    proc = subprocess.Popen(
        [*TETHER, "orchestrate", "Go.", "--model", f"scripted:{path}",
         "--workspace", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stderr is not None
    while "'hang one': step 1" not in (line := proc.stderr.readline()):
        assert line, "tether ended before the sub-agent started"
    time.sleep(0.3)  # its first model turn (a minute long) is under way
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    [receipt] = [x for x in out.splitlines() if "stopped (interrupted)" in x]
    assert re.search(r"\(2 runs, ladder rung \w+\); 0 processes left, 0 model turns", receipt)
    assert receipt.endswith("(1 in flight abandoned), 0 tokens billed after it")


def printed_commands(stdout: str) -> list[list[str]]:
    """The `continue:` commands `tether orchestrate` printed, as argv."""
    return [shlex.split(c) for c in re.findall(r"^    continue: (.*)$", stdout, re.MULTILINE)]


def as_printed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> Any:
    """Run a printed `tether ...` command as a shell would: `tether` from PATH (this
    interpreter's), in another directory."""
    assert argv[0] == "tether"
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=90, cwd=cwd, check=False,
        env={**os.environ, **(env or {}), "PATH": path},
    )  # fmt: skip


def test_a_continuable_orchestration_prints_for_each_sub_agent_a_command_that_continues_it(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    model = book(ws)  # the book in the workspace, the store outside it
    state = tmp_path / "state"
    got = tether(
        "orchestrate", "Survey.", "--model", f"scripted:{model}",
        "--workspace", str(ws), "--continuable", "--state", str(state),
        "--keep-alive", "2s", "--quiet",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    commands = printed_commands(got.stdout)
    assert len(commands) == 2
    ids = [argv[3] for argv in commands]
    listed = tether("agents", "list", "--state", str(state), "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(a["id"] for a in json.loads(listed.stdout)) == sorted(ids)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    argv = [word if word != "MESSAGE" else "Anything else?" for word in commands[0]]
    assert argv == ["tether", "agents", "send", ids[0], "Anything else?", "--state", str(state)]
    sent = as_printed(argv, elsewhere)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("completed: found it")


def openai_turn(*calls: tuple[str, dict[str, Any]]) -> Any:
    from model_server import Reply

    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}
            for i, (name, arguments) in enumerate(calls)
        ],
    }  # fmt: skip
    return Reply(
        body={
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1},
        }
    )


def test_the_printed_command_names_a_model_whose_base_url_the_store_is_not_trusted_with(
    tmp_path: Path,
) -> None:
    from model_server import ModelServer

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("TODO\n")
    server = ModelServer()
    try:
        server.script(
            openai_turn(("task", {"subagent_type": "explorer", "description": "look",
                                  "prompt": "Find A."})),
            openai_turn(("complete", {"summary": "found it", "paths": ["notes.md"]})),
            openai_turn(("complete", {"summary": "done", "paths": []})),
            openai_turn(("complete", {"summary": "found it again", "paths": ["notes.md"]})),
        )  # fmt: skip
        model = f"openai:m@{server.url}/v1"
        state = tmp_path / "state"
        got = tether(
            "orchestrate", "Survey.", "--model", model, "--workspace", str(ws),
            "--continuable", "--state", str(state), "--keep-alive", "1s", "--quiet",
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        [argv] = printed_commands(got.stdout)
        assert argv[5:] == ["--state", str(state), "--model", model]
        argv[4] = "Again?"
        sent = as_printed(argv, tmp_path)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.startswith("completed: found it again")
        # Without --model, the stored URL is not trusted: bad usage, nothing is sent.
        before = len(server.received)
        refused = as_printed(argv[:5] + argv[5:7], tmp_path)
        assert refused.returncode == 2 and f"names the base URL {server.url}/v1" in refused.stderr
        assert len(server.received) == before
    finally:
        server.close()


def test_continuation_flags_without_continuable_are_bad_usage(tmp_path: Path) -> None:
    for flags in (["--keep-alive", "1m"], ["--state", str(tmp_path)]):
        got = tether("orchestrate", "x", "--model", "scripted:x", *flags)
        assert got.returncode == 2 and "applies only with --continuable" in got.stderr
    got = tether(
        "orchestrate", "x", "--model", "scripted:x", "--continuable", "--keep-alive", "soon"
    )
    assert got.returncode == 2 and "keep" in got.stderr.lower()


def test_a_continuable_orchestration_whose_store_lies_in_its_workspace_is_refused(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    got = tether(
        "orchestrate", "Survey.", "--model", f"scripted:{book(tmp_path)}",
        "--workspace", str(tmp_path), "--continuable", "--state", str(state), "--json",
    )  # fmt: skip
    assert got.returncode == 2, got.stdout + got.stderr
    assert f"directory {state} lies inside the workspace {tmp_path}" in got.stderr
    assert got.stdout == "" and "child pid" not in got.stderr  # nothing ran
    assert not state.exists()
