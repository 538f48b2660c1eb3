"""The `tether` command: results on stdout, progress on stderr, exit status 0 / 1 / 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tether.protocol.schema import render

TETHER = [sys.executable, "-m", "tether.parent.cli"]
SCRIPT = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
  "arguments": {"summary": "all good", "paths": ["a.txt"]}}]}]}"""


def tether(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TETHER, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


@pytest.fixture
def script(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("hello\n")
    path = tmp_path / "script.json"
    path.write_text(SCRIPT)
    return path


def test_run_prints_a_readable_result_and_progress_on_stderr(script: Path) -> None:
    got = tether(
        "run", "say hi", "--model", f"scripted:{script}", "--workspace", str(script.parent)
    )
    assert got.returncode == 0, got.stderr
    assert "completed: all good" in got.stdout
    assert "artifact" in got.stdout and "a.txt" in got.stdout
    assert "child pid" in got.stderr
    assert "tool complete" in got.stderr
    assert "child pid" not in got.stdout


def test_run_json_prints_the_run_result(script: Path) -> None:
    got = tether(
        "run", "hi", "--model", f"scripted:{script}", "--workspace", str(script.parent), "--json"
    )
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout)
    assert result["success"] is True
    assert result["summary"] == "all good"
    assert result["artifacts"][0]["fsType"] == "file"
    assert "turnCount" in result


def test_a_failed_run_exits_1_with_the_reason(tmp_path: Path) -> None:
    got = tether(
        "run",
        "hi",
        "--workspace",
        str(tmp_path),
        "--command",
        f"{sys.executable} -I -c 'import sys; print(\"went wrong\", file=sys.stderr); sys.exit(5)'",
        "--json",
    )
    assert got.returncode == 1
    result = json.loads(got.stdout)
    assert result["success"] is False
    assert result["failure"]["kind"] == "exit_nonzero"
    assert result["failure"]["exitCode"] == 5
    assert "went wrong" in result["failure"]["stderrTail"]


def test_a_command_that_does_not_exist_is_a_spawn_failure_not_a_crash(tmp_path: Path) -> None:
    got = tether("run", "hi", "--workspace", str(tmp_path), "--command", "no-such-command-xyz")
    assert got.returncode == 1
    assert "spawn_failed" in got.stdout
    assert "Traceback" not in got.stderr


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["run", "hi", "--timeout", "soon"], "--timeout: expected a duration"),
        (["run", "hi", "--timeout", "30s1m"], "--timeout: expected a duration"),
        (["run", "hi", "--memory", "lots"], "--memory: expected a size"),
        (["run", "hi", "--memory", "512"], "--memory: '512' has no unit"),
        (["run", "hi", "--cpu", "-1"], "--cpu"),
        (["run", "hi", "--processes", "0"], "--processes: expected a positive whole number"),
        (["run", "hi", "--file-size", "big"], "--file-size: expected a size"),
        (["run", "hi"], "needs a model"),
        (["run", "hi", "--agent", "explorer"], "needs a model"),
        (["run", "hi", "--model", "scripted:/no/such/file.json"], "cannot read model script"),
        (["run", "hi", "--model", "mystery:thing"], "unknown model"),
        (["run", "hi", "--agent", "wizard"], "unknown agent"),
        (["run", "hi", "--workspace", "/no/such/dir"], "not a directory"),
        (["run", "hi", "--command", ""], "must not be empty"),
        (["run"], "required"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_usage_exits_2_with_a_clear_message_and_spawns_nothing(
    args: list[str], complaint: str
) -> None:
    got = tether(*args)
    assert got.returncode == 2, got
    assert complaint in got.stderr
    assert "Traceback" not in got.stderr
    assert "child pid" not in got.stderr


def test_schema_prints_the_checked_in_protocol_schema() -> None:
    got = tether("schema")
    assert got.returncode == 0
    assert got.stdout == render()
    assert json.loads(got.stdout)["protocolVersion"] == 1


def test_limits_given_on_the_command_line_reach_the_child(tmp_path: Path) -> None:
    probe = "print(open('/proc/self/limits').read(), file=__import__('sys').stderr); exit(9)"
    got = tether(
        "run",
        "hi",
        "--workspace",
        str(tmp_path),
        "--json",
        "--cpu",
        "7s",
        "--open-files",
        "77",
        "--file-size",
        "1M",
        "--command",
        f'{sys.executable} -I -c "{probe}"',
    )
    tail = json.loads(got.stdout)["failure"]["stderrTail"]
    rows = {ln[:26].strip(): ln[26:].split()[:2] for ln in tail.splitlines()[1:] if ln.strip()}
    assert rows["Max cpu time"] == ["7", "8"]
    assert rows["Max open files"] == ["77", "77"]
    assert rows["Max file size"] == [str(1 << 20)] * 2


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_tether_cancels_the_run_prints_it_and_leaves_nothing(
    tmp_path: Path, signum: int, status: int
) -> None:
    script = tmp_path / "slow.json"
    script.write_text('[{"text": "thinking", "delay": 30}]')
    proc = subprocess.Popen(
        [
            *TETHER,
            "run",
            "hi",
            "--json",
            "--model",
            f"scripted:{script}",
            "--workspace",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A background job may inherit SIGINT ignored; a person's terminal would not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while "step" not in line and line:
        line = proc.stderr.readline()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == status, err
    result = json.loads(out)
    assert result["status"] == "aborted"
    assert result["failure"]["kind"] == "cancelled"
