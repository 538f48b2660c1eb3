"""`tether run --provider`, `[[provider]]` tables in the `--agents` file, and `tether doctor`'s
list of providers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TETHER = [sys.executable, "-m", "tether.parent.cli"]
AGENT = ROOT / "tests" / "children" / "acp_agent.py"
SCRIPT = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
  "arguments": {"summary": "all good"}}]}]}"""


def tether(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TETHER, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.json"
    path.write_text(SCRIPT)
    ws = tmp_path / "ws"
    ws.mkdir()
    return path


def test_run_provider_inprocess_says_it_ran_without_isolation(script: Path) -> None:
    ws = script.parent / "ws"
    got = tether(
        "run", "hi", "--model", f"scripted:{script}", "--workspace", str(ws),
        "--provider", "inprocess", "--json",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout)
    assert result["summary"] == "all good"
    assert result["isolation"]["level"] == "none" and result["isolation"]["warning"]
    readable = tether(
        "run", "hi", "--model", f"scripted:{script}", "--workspace", str(ws),
        "--provider", "inprocess",
    )  # fmt: skip
    assert "isolation none: the run was served inside the supervisor's own process" in (
        readable.stdout
    )


def test_run_provider_acp_with_a_relative_command_runs_the_agent(script: Path) -> None:
    ws = script.parent / "ws"
    steps = json.dumps([{"say": "hello over ACP"}])
    got = tether(
        "run", steps, "--model", f"scripted:{script}", "--workspace", str(ws),
        "--provider", f"acp:{sys.executable} tests/children/acp_agent.py", "--json",
        cwd=ROOT,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout)
    assert result["success"] and result["summary"] == "hello over ACP"
    assert "tether: child pid" in got.stderr and str(AGENT) in got.stderr


def test_a_provider_table_in_the_agents_file_is_selectable_by_name(
    script: Path, tmp_path: Path
) -> None:
    (tmp_path / "agents.toml").write_text(
        f"""
[[provider]]
name = "scripted-acp"
kind = "acp"
command = ["{sys.executable}", "{AGENT}"]
summary = "the test agent"
"""
    )
    steps = json.dumps([{"say": "from the table"}])
    got = tether(
        "run", steps, "--model", f"scripted:{script}", "--workspace", str(tmp_path / "ws"),
        "--agents", str(tmp_path / "agents.toml"), "--provider", "scripted-acp", "--json",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["summary"] == "from the table"


def test_an_unknown_provider_is_bad_usage_with_exit_2(script: Path) -> None:
    got = tether("run", "hi", "--workspace", str(script.parent), "--provider", "nope")
    assert got.returncode == 2
    assert "no provider named 'nope'" in got.stderr and "inprocess" in got.stderr


def test_acp_without_its_command_is_bad_usage(script: Path) -> None:
    got = tether("run", "hi", "--workspace", str(script.parent), "--provider", "acp")
    assert got.returncode == 2 and "needs the ACP agent's command" in got.stderr


def test_doctor_lists_every_provider_and_whether_it_can_run_here(tmp_path: Path) -> None:
    got = tether("doctor", "--json")
    assert got.returncode == 0, got.stderr
    providers = {p["name"]: p for p in json.loads(got.stdout)["providers"]}
    assert list(providers) == ["spawn", "fork", "command", "inprocess", "acp"]
    assert providers["spawn"]["ready"] and providers["inprocess"]["ready"]
    assert not providers["acp"]["ready"] and "acp:COMMAND" in providers["acp"]["why"]
    (tmp_path / "agents.toml").write_text(
        f"""
[[provider]]
name = "here"
kind = "acp"
command = ["{sys.executable}", "{AGENT}"]

[[provider]]
name = "missing"
kind = "command"
command = "/nonexistent/child --flag"
"""
    )
    got = tether("doctor", "--agents", str(tmp_path / "agents.toml"))
    assert got.returncode == 0, got.stderr
    assert "providers (tether run --provider NAME):" in got.stdout
    lines = {ln.split(":")[0].strip(): ln for ln in got.stdout.splitlines() if ln.startswith("  ")}
    assert "(ready)" in lines["here"]
    assert "not ready" in lines["missing"] and "no such file" in lines["missing"]


def test_a_bad_provider_table_is_refused_with_where_and_what(tmp_path: Path) -> None:
    (tmp_path / "agents.toml").write_text('[[provider]]\nname = "x"\nkind = "ssh"\ncommand = "a"\n')
    got = tether("doctor", "--agents", str(tmp_path / "agents.toml"))
    assert got.returncode == 2
    assert "agents.toml" in got.stderr and "kind" in got.stderr and "acp, command" in got.stderr


def test_orchestrate_refuses_a_definition_naming_an_unknown_provider(tmp_path: Path) -> None:
    (tmp_path / "agents.toml").write_text(
        '[[agent]]\ntype = "remote"\ndescription = "elsewhere"\nprovider = "nowhere"\n'
    )
    got = tether(
        "orchestrate", "go", "--model", "scripted:/dev/null", "--agents",
        str(tmp_path / "agents.toml"), "--workspace", str(tmp_path),
    )  # fmt: skip
    assert got.returncode == 2
    assert "names provider 'nowhere'" in got.stderr


def provider_file(tmp_path: Path, *agents: str) -> Path:
    """A definitions file with the test ACP agent as `[[provider]]` "here", and `agents`."""
    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
[[provider]]
name = "here"
kind = "acp"
command = ["{sys.executable}", "{AGENT}"]
summary = "the test agent"
"""
        + "".join(agents)
    )
    return path


FOREIGN = '\n[[agent]]\ntype = "foreign"\ndescription = "An ACP agent."\nprovider = "here"\n'
EXPLORER = '\n[[agent]]\ntype = "explorer"\n'


def agent_type_enum(schema: dict[str, object]) -> list[str] | None:
    props = schema["properties"]
    assert isinstance(props, dict)
    return props["agentType"]["enum"] if "agentType" in props else None


def test_task_schema_offers_agent_type_as_orchestrate_does_with_the_files_providers(
    tmp_path: Path,
) -> None:
    import anyio

    from tether.parent import Supervisor
    from tether.parent.delegation.runner import SupervisorRunner

    async def orchestrates() -> list[str]:
        async with Supervisor() as sup:
            return list(SupervisorRunner(sup).agent_types())

    default = json.loads(tether("task-schema").stdout)
    assert agent_type_enum(default) == anyio.run(orchestrates) == ["spawn", "fork"]
    got = tether("task-schema", "--agents", str(provider_file(tmp_path, FOREIGN)))
    assert got.returncode == 0, got.stderr
    schema = json.loads(got.stdout)
    assert agent_type_enum(schema) == ["spawn", "fork", "here"]
    assert "- here: the test agent" in schema["properties"]["agentType"]["description"]
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(FOREIGN.replace('"here"', '"nowhere"'))
    refused = tether("task-schema", "--agents", str(unknown))
    assert refused.returncode == 2 and "names provider 'nowhere'" in refused.stderr


def test_mcp_offers_agent_type_only_with_a_second_provider_and_never_fork(tmp_path: Path) -> None:
    def task_schema(*args: str) -> dict[str, object]:
        got = tether("mcp", "--list-tools", *args)
        assert got.returncode == 0, got.stderr
        [task] = [t for t in json.loads(got.stdout)["tools"] if t["name"] == "task"]
        return dict(task["inputSchema"])

    assert agent_type_enum(task_schema()) is None  # spawn alone: nothing to choose
    with_file = task_schema("--agents", str(provider_file(tmp_path, EXPLORER, FOREIGN)))
    assert agent_type_enum(with_file) == ["spawn", "here"]
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(FOREIGN.replace('"here"', '"nowhere"'))
    refused = tether("mcp", "--agents", str(unknown), "--model", "scripted:/dev/null")
    assert refused.returncode == 2 and "names provider 'nowhere'" in refused.stderr
