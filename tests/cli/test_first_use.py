"""What a new user meets first on the command line: help, the version, flags named in errors,
durations as people write them, and progress that shows what the run is doing (refusals,
results, heartbeats, the launcher, the child's pid, the duration)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tether.parent.process.wired import version

TETHER = [sys.executable, "-m", "tether.parent.cli"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WRITES_THEN_COMPLETES = """{"turns": [
  {"text": "Writing.", "toolCalls": [{"name": "write_file",
    "arguments": {"path": "out.md", "content": "x"}}]},
  {"text": "Done.", "toolCalls": [{"name": "complete",
    "arguments": {"summary": "tried", "paths": []}}]}
]}"""
SLOW_TOOL = """{"turns": [
  {"text": "Waiting.", "toolCalls": [{"name": "bash", "arguments": {"command": "sleep 2.6"}}]},
  {"text": "Done.", "toolCalls": [{"name": "complete",
    "arguments": {"summary": "waited", "paths": []}}]}
]}"""


def tether(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TETHER, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


def test_bare_tether_prints_help_with_every_command() -> None:
    got = tether()
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("usage: tether")
    for command in ("run", "doctor", "conformance", "schema"):
        assert command in got.stdout


def test_tether_version_prints_the_installed_version() -> None:
    got = tether("--version")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == f"tether {version()}"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a fresh `python -I` (the installed tether, nothing of this process)."""
    return subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_tether_command_exits_with_mains_code_its_output_flushed_and_exit_handlers_run() -> (
    None
):
    # `command()` freezes the heap before the interpreter's shutdown (no last collection over
    # it): what a command printed, its exit handlers and its code are all still there.
    probe = (
        "import atexit, gc, sys\n"
        "from tether.parent.cli import main as cli\n"
        "def main(argv=None):\n"
        "    sys.stdout.write('no newline yet')\n"
        "    atexit.register(lambda: print(' | at exit, frozen:', gc.get_freeze_count() > 0))\n"
        "    return 3\n"
        "cli.main = main\n"
        "cli.command()\n"
    )
    got = _python(probe)
    assert got.returncode == 3, got.stderr
    assert got.stdout == "no newline yet | at exit, frozen: True\n"
    (script,) = entry_points(group="console_scripts", name="tether")
    assert script.value == "tether._command:main"


def test_the_tether_command_imports_the_command_line_with_the_collector_off_then_on() -> None:
    # Collections are counted from the entry point's call until it freezes what the imports
    # built (the command itself imports more, lazily, with the collector on).
    probe = (
        "import gc, sys\n"
        "collections, at_freeze = [], []\n"
        "gc.callbacks.append(lambda phase, info: collections.append(phase))\n"
        "freeze = gc.freeze\n"
        "def counted():\n"
        "    at_freeze.append(len(collections))\n"
        "    freeze()\n"
        "gc.freeze = counted\n"
        "from tether import _command\n"  # (compiled first when it has no bytecode yet)
        "sys.argv = ['tether', '--version']\n"
        "before = len(collections)\n"
        "try:\n"
        "    _command.main()\n"
        "except SystemExit:\n"
        "    print(at_freeze[0] - before, gc.isenabled(), gc.get_freeze_count() > 10_000)\n"
    )
    got = _python(probe)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[-1] == "0 True True", got.stdout


def test_the_builtin_loop_without_a_model_is_bad_usage_and_says_how_to_fix_it(
    tmp_path: Path,
) -> None:
    got = tether("run", "hi", "--workspace", str(tmp_path))
    assert got.returncode == 2
    assert "needs a model" in got.stderr and "--model" in got.stderr
    assert "child pid" not in got.stderr


def test_a_command_child_needs_no_model_and_takes_a_compound_timeout(tmp_path: Path) -> None:
    code = f"{sys.executable} -I -c 'raise SystemExit(4)'"
    got = tether(
        "run", "hi", "--workspace", str(tmp_path), "--command", code, "--timeout", "1m30s", "--json"
    )
    assert got.returncode == 1, got.stderr
    result = json.loads(got.stdout)
    assert result["failure"]["kind"] == "exit_nonzero"


def test_json_names_the_launcher_the_childs_pid_and_the_duration(tmp_path: Path) -> None:
    code = f"{sys.executable} -I -c 'raise SystemExit(4)'"
    got = tether("run", "hi", "--workspace", str(tmp_path), "--command", code, "--json")
    result = json.loads(got.stdout)
    assert result["launcher"] == "local"
    assert isinstance(result["pid"], int) and f"child pid {result['pid']}" in got.stderr
    assert result["durationSeconds"] > 0


def test_progress_shows_a_refused_tool_call_and_its_reason(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(WRITES_THEN_COMPLETES)
    ws = tmp_path / "ws"
    ws.mkdir()
    got = tether(
        "run", "hi", "--agent", "explorer", "--model", f"scripted:{script}", "--workspace", str(ws)
    )
    assert got.returncode == 0, got.stderr
    refused = [ln for ln in got.stderr.splitlines() if ln.startswith("  ! write_file")]
    assert refused and "read-only" in refused[0], got.stderr
    assert "  = complete:" in got.stderr
    assert not (ws / "out.md").exists()
    assert "launcher local" in got.stdout and "process " in got.stdout


def test_progress_shows_heartbeats_while_a_tool_call_is_slow(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(SLOW_TOOL)
    got = tether(
        "run",
        "hi",
        "--agent",
        "tester",  # the built-in role that may run commands (build mode)
        "--model",
        f"scripted:{script}",
        "--workspace",
        str(tmp_path),
    )
    assert got.returncode == 0, got.stderr
    assert "still waiting on tool:bash" in got.stderr


def test_an_idle_limit_below_the_heartbeat_headroom_is_warned_about(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(WRITES_THEN_COMPLETES)
    got = tether(
        "run",
        "hi",
        "--model",
        f"scripted:{script}",
        "--workspace",
        str(tmp_path),
        "--idle-timeout",
        "2s",
    )
    assert got.returncode == 0, got.stderr
    assert "tether: warning: idle limit 2s" in got.stderr and "at least 4s" in got.stderr


def test_a_run_under_bwrap_names_its_launcher_in_progress_and_json(tmp_path: Path) -> None:
    from tether.parent.cli.doctor import _bwrap

    if not _bwrap()["works"]:
        pytest.skip(f"bwrap does not work here: {_bwrap().get('why')}")
    code = f"{sys.executable} -I -c 'raise SystemExit(4)'"
    got = tether(
        "run",
        "hi",
        "--workspace",
        str(tmp_path),
        "--command",
        code,
        "--launcher",
        "bwrap",
        "--json",
    )
    result = json.loads(got.stdout)
    assert result["launcher"] == "bwrap"
    assert "started under bwrap" in got.stderr


def test_the_readmes_runs_work_on_a_scratch_copy_and_leave_the_checkout_alone(
    tmp_path: Path,
) -> None:
    from tether.parent.cli.doctor import _bwrap

    root = EXAMPLES.parent
    before = sorted(p.name for p in (EXAMPLES / "workspace").iterdir())
    ws = tmp_path / "ws"
    subprocess.run(["cp", "-r", f"{EXAMPLES / 'workspace'}/.", str(ws)], check=True)
    m = "scripted:examples/explorer.json"
    base = ["run", "Find the TODOs", "--model", m, "--workspace", str(ws)]
    explorer = tether(*base, "--agent", "explorer", cwd=root)
    assert explorer.returncode == 0, explorer.stderr
    assert "! write_file refused or failed: denied" in explorer.stderr
    assert not (ws / "TODO-REPORT.md").exists()
    builder = tether(*base, "--agent", "tester", "--quiet", cwd=root)
    assert builder.returncode == 0, builder.stderr
    assert (ws / "TODO-REPORT.md").exists()
    timed = tether(
        *base, "--agent", "explorer", "--timeout", "1m30s", "--idle-timeout", "10s", cwd=root
    )
    assert timed.returncode == 0, timed.stderr
    own = tether(*base, "--agent", "examples/agents/summarizer.py:make", "--quiet", cwd=root)
    assert own.returncode == 0, own.stderr
    if _bwrap()["works"]:
        limits = ["--memory", "512M", "--cpu", "30s", "--processes", "64", "--file-size", "100M"]
        boxed = tether(*base, *limits, "--launcher", "bwrap", "--json", cwd=root)
        assert boxed.returncode == 0, boxed.stdout + boxed.stderr
        assert json.loads(boxed.stdout)["launcher"] == "bwrap"
    assert sorted(p.name for p in (EXAMPLES / "workspace").iterdir()) == before
