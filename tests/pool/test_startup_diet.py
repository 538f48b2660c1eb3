"""The start-up diet: what runs before the first message loads no agent machinery, and the
parent's CLI loads no HTTP client unless a model needs one."""

from __future__ import annotations

import json
import subprocess
import sys

from tether.child.session import DEFAULT_TOOL_NAMES
from tether.child.tools import default_tools

AGENT_MACHINERY = (
    "tether.child.runs",
    "tether.child.agent",
    "tether.child.agent_spec",
    "tether.child.loop",
    "tether.child.tools",
    "tether.child.tools.base",
    "tether.child.workspace",
    "tether.contain.confined",
    "tether.child.tools.bash",
)


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    proc = subprocess.run(
        [sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def test_the_tool_names_announced_at_initialize_are_the_default_tools() -> None:
    assert list(DEFAULT_TOOL_NAMES) == default_tools().names()


def test_the_childs_handshake_path_imports_no_agent_machinery() -> None:
    loaded = _modules_after("import tether.child.server, tether.child.session")
    assert not loaded & set(AGENT_MACHINERY)


def test_an_initialized_child_answers_a_run_after_loading_the_machinery_in_the_background() -> None:
    init = {"protocolVersion": 1, "clientInfo": {"name": "t"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "id": 2, "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "exit"},
    ]
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "tether.child"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=30,
    )
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stderr
    assert answers[0]["result"]["capabilities"]["tools"] == list(DEFAULT_TOOL_NAMES)
    assert answers[1] == {"jsonrpc": "2.0", "id": 2, "result": None}


def test_the_cli_and_the_supervisor_load_no_http_client() -> None:
    loaded = _modules_after("import tether.parent.cli.main, tether.parent.supervisor")
    assert not {m for m in loaded if m.split(".")[0] in ("httpx", "httpcore", "h11", "ssl")}
    assert "tether.parent.models.openai" not in loaded
