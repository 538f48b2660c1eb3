"""Where a user names a network policy, and where tether names it back: `ChildConfig(network=)`,
`--allow-net` / `--net-credential` on `tether run`, `orchestrate` and `mcp`, a definitions
file's `network` (a sub-agent within its orchestration's policy), every result, `tether
doctor`; and what a run that needs no network never loads."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from egress_kit import site

from tether.parent.cli.main import main
from tether.parent.cli.options import UsageError, add_isolation_options, config_from
from tether.parent.delegation.files import definitions_from_document, dump_definitions
from tether.parent.egress.policy import NONE, Allowed, Credential, policy_of
from tether.parent.process.config import ChildConfig
from tether.parent.roles.definitions import DefinitionError

HERE = Path(__file__).parent


def parsed(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_isolation_options(p)
    return p.parse_args(list(argv))


def test_allow_net_and_net_credential_make_the_runs_policy() -> None:
    cfg = config_from(
        parsed(
            "--allow-net",
            "pypi.org",
            "--allow-net",
            "*.example.com:80,443",
            "--net-credential",
            "api.example.com=EXAMPLE_TOKEN",
        )
    )
    assert cfg.network_policy.describe() == [
        "pypi.org:443",
        "*.example.com:80,443",
        "api.example.com:443 (adds Authorization: Bearer $EXAMPLE_TOKEN)",
    ]
    assert config_from(parsed()).network_policy is not None
    assert config_from(parsed()).network_policy.none


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--allow-net", "http://pypi.org"], "--allow-net"),
        (["--allow-net", "pypi.org:99999"], "--allow-net"),
        (["--net-credential", "api.example.com"], "--net-credential"),
        (["--net-credential", "api.example.com=not a var"], "--net-credential"),
    ],
)
def test_a_bad_flag_is_a_usage_error_naming_it(argv: list[str], flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        config_from(parsed(*argv))


def test_every_command_that_runs_children_takes_allow_net() -> None:
    for command in ("run", "orchestrate", "mcp"):
        got = subprocess.run(
            [sys.executable, "-m", "tether.parent.cli", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "--allow-net HOST[:PORT]" in got.stdout and "--net-credential" in got.stdout


def test_child_config_takes_none_a_list_or_a_policy() -> None:
    assert ChildConfig().network_policy is NONE
    assert ChildConfig(network="none").network_policy is NONE
    assert ChildConfig(network=["pypi.org"]).network_policy.describe() == ["pypi.org:443"]
    with pytest.raises(ValueError):
        ChildConfig(network="pypi.org")


def test_tether_run_with_allow_net_reaches_a_listed_literal_and_its_result_names_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the command line, a protocol child (no tether in it) reaches the loopback server
    the run lists by its literal, and is refused one it does not."""
    with site("pkg.test") as pkg, site("other.test") as other:
        plan = [
            ["listed", "fetch", [f"http://127.0.0.1:{pkg.port}/hello"]],
            [
                "unlisted",
                "raw",
                [f"GET http://127.0.0.1:{other.port}/ HTTP/1.1\r\nHost: x\r\n\r\n"],
            ],
        ]
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        code = main(
            [
                "run",
                "probe",
                "--workspace",
                str(tmp_path),
                "--command",
                f"{sys.executable} {HERE / 'net_child.py'}",
                "--allow-net",
                f"127.0.0.1:{pkg.port}",
                "--json",
                "--quiet",
            ]
        )
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["listed"] == "ok: 200 hello from pkg.test\n"  # listed: loopback allowed
    assert report["unlisted"].startswith("refused"), report["unlisted"]
    assert result["isolation"]["network"]["policy"] == "allowlist"
    assert result["isolation"]["network"]["allow"] == [f"127.0.0.1:{pkg.port}"]
    assert other.seen == []


# --- definitions and sub-agents -----------------------------------------------------------------


def test_a_definitions_file_network_is_read_checked_and_written_back() -> None:
    doc = {
        "agent": [
            {
                "type": "tester",
                "network": ["pypi.org", {"allow": "api.test", "credentialEnv": "T"}],
            },
            {"type": "reviewer", "network": []},
        ]
    }
    tester, reviewer = definitions_from_document(doc)
    entries = tester.network_entries()
    assert entries is not None and [str(e) for e in entries] == ["pypi.org:443", "api.test:443"]
    assert entries[1].credential == Credential(env="T")
    assert reviewer.network_entries() == ()
    again = definitions_from_document(
        __import__("tomllib").loads(dump_definitions([tester, reviewer]))
    )
    assert again == [tester, reviewer]
    with pytest.raises(DefinitionError, match=r"key 'network'.*not a URL"):
        definitions_from_document({"agent": [{"type": "tester", "network": ["http://x.test"]}]})


def test_a_sub_agent_gets_at_most_what_its_orchestration_allows() -> None:
    from tether.parent.delegation.runner import SupervisorRunner

    class Sup:
        config = ChildConfig(network=["*.example.com", "pypi.org"])

    class Request:
        def __init__(self, network: list[str] | None) -> None:
            from tether.parent.roles.definitions import SubagentDefinition

            self.definition = SubagentDefinition(type="t", description="d", network=network)

    runner = SupervisorRunner(Sup(), config=Sup.config)  # type: ignore[arg-type]
    same = runner.config_for(Request(None))  # type: ignore[arg-type]
    assert same is Sup.config
    narrowed = runner.config_for(Request(["api.example.com", "evil.org"]))  # type: ignore[arg-type]
    assert narrowed is not None
    policy = narrowed.network_policy
    assert isinstance(policy.decide("api.example.com", 443), Allowed)
    assert not isinstance(policy.decide("www.example.com", 443), Allowed)
    assert not isinstance(policy.decide("evil.org", 443), Allowed)
    nothing = runner.config_for(Request([]))  # type: ignore[arg-type]
    assert nothing is not None and nothing.network_policy.none


# --- what names it back -------------------------------------------------------------------------


def test_doctor_names_the_network_policy_support(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["network"]
    assert got["default"] == "none" and got["enforced"] in ("namespace", "port", "none")
    assert got["credentials"] is True
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "network: none by default; --allow-net HOST[:PORT]" in out
    assert "credentials (--net-credential): added at the proxy" in out


def test_a_supervisor_whose_runs_have_no_network_loads_no_proxy_and_no_cryptography(
    tmp_path: Path,
) -> None:
    code = (
        "import anyio, json, sys\n"
        "from tether.parent.supervisor import Supervisor\n"
        "async def main():\n"
        "    async with Supervisor() as sup:\n"
        f"        await sup.run('x', workspace={str(tmp_path)!r}, "
        "command=[sys.executable, '-c', 'pass'])\n"
        "anyio.run(main)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(("
        "'cryptography', 'tether.parent.egress.proxy', 'tether.parent.egress.tls', 'h11')))))\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout.strip().splitlines()[-1]) == []


def test_a_policy_of_no_destinations_is_none() -> None:
    assert policy_of([]).none and policy_of([]).name == "none"


def test_the_orchestrate_view_shows_the_orchestrators_network_decisions() -> None:
    """`tether orchestrate` with --allow-net gives the orchestrator's run a proxy too: its
    decisions are lines of the live view (the view used to assert every other event of the
    orchestrator's run was its end)."""
    from tether.parent.cli.live import TreeState
    from tether.parent.egress.events import NetEvent
    from tether.parent.run.events import RunStarted

    state = TreeState()
    state.apply(RunStarted("run-1", 42, ("x",)), now=0.0)
    lines = state.apply(
        NetEvent("run-1", "net.denied", "other.test", 443, reason="not in the policy"), now=1.0
    )
    assert lines == ["orchestrator net: refused other.test:443: not in the policy"]
    assert state.orchestrator.state == "running"
    from tether.parent.run.subagent_events import SubagentProgress, SubagentStarted

    state.apply(SubagentStarted("sa-1", "tester", "fetch", "c1", "task", False), now=2.0)
    denied = SubagentProgress(
        "sa-1",
        "tester",
        "fetch",
        "net.denied",
        {"host": "evil.test", "port": 80, "reason": "evil.test is not in the network policy"},
        1,
        None,
        1.0,
        0,
    )
    assert state.apply(denied, now=3.0) == [
        "  sa-1 tester 'fetch': net: refused evil.test:80: evil.test is not in the network policy"
    ]
