"""`tether mcp`'s bad usage is refused before anything is served or spawned, and the MCP SDK is
imported by that subcommand alone."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import WAIT, command, model_script

from tether.parent.cli import main as cli
from tether.parent.delegation import builtin_registry, task_tool

ROOT = Path(__file__).resolve().parents[2]
SDK_MODULES = {"parent/mcp_server/server.py", "parent/mcp_server/stdio.py"}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--workspace", "."], "--model is required: explorer, reviewer, verifier, tester, "),
        (["--model", "scripted:/nonexistent/model.json"], "/nonexistent/model.json"),
        (["--model", "warp:drive"], "unknown model 'warp:drive'"),
        (["--model", "scripted:{script}", "--workspace", "/nonexistent/ws"], "is not a directory"),
        (["--model", "scripted:{script}", "--agents", "{bad}"], "key 'maxSteps': expected `int`"),
        (["--model", "scripted:{script}", "--memory", "lots"], "memory"),
        (["--model", "scripted:{script}", "--max-concurrent", "0"], "--max-concurrent"),
        (["--model", "scripted:{script}", "--state", "{bad}"], "--state applies only with"),
    ],
)
def test_bad_usage_exits_2_with_the_reason_before_serving(
    tmp_path: Path, args: list[str], said: str
) -> None:
    script = model_script(tmp_path / "model.json")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[agent]]\ntype = "x"\ndescription = "d"\nmaxSteps = "many"\n')
    got = run(*(a.format(script=script, bad=bad) for a in args))
    assert got.returncode == 2, got.stderr
    assert said in got.stderr
    assert got.stdout == ""


def test_without_the_sdk_the_subcommand_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    real = importlib.util.find_spec

    def no_sdk(name: str, *rest: object) -> object:
        return None if name == "mcp" else real(name, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", no_sdk)
    assert cli.main(["mcp", "--model", f"scripted:{model_script(tmp_path / 'm.json')}"]) == 2
    assert "pip install 'tether[mcp]'" in capsys.readouterr().err


def test_list_tools_prints_the_tools_list_answer_without_serving() -> None:
    got = run("--list-tools")
    assert got.returncode == 0, got.stderr
    [task] = json.loads(got.stdout)["tools"]
    tool = task_tool(builtin_registry())
    assert tool is not None
    assert (task["name"], task["description"], task["inputSchema"]) == (
        "task",
        tool.description,
        tool.input_schema,
    )


def test_only_the_mcp_server_modules_import_the_sdk() -> None:
    importers = set()
    for path in sorted((ROOT / "parent").rglob("*.py")) + sorted((ROOT / "child").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(n.split(".")[0] in ("mcp", "mcp_types") for n in names):
                importers.add(str(path.relative_to(ROOT)))
    assert importers == SDK_MODULES


def test_the_cli_and_the_rest_of_tether_load_without_the_sdk() -> None:
    code = (
        "import sys, json\n"
        "import tether.parent, tether.parent.cli.main, tether.parent.delegation.orchestrator\n"
        "import tether.parent.cli.mcp, tether.parent.mcp_server.task\n"
        "tether.parent.cli.main._parser().parse_args(['mcp', '--model', 'm'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('mcp', 'mcp_types', 'starlette', 'uvicorn'))))\n"
    )
    got = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=WAIT
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == []
