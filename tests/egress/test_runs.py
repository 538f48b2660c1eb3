"""Network by policy, end to end (issue 33), loopback only: sandboxed children — tether's own
driving `bash`, and a protocol child — reach the hosts their run allows through the run's
egress proxy in the parent, and nothing else. Loopback servers play the allowed and denied
hosts through the proxy's test name table; a test CA stands in for the public ones. As root
the child is in a private network namespace whose one listener is the proxy's.

Every denial the issue lists is tried from inside the sandbox: another host, another port
of an allowed host, an IP literal, a Host or SNI that differs from the CONNECT, a relayed
CONNECT (inside a tunnel, or back to the proxy itself), DNS, a direct connection around the
proxy, UDP — each refused, and the proxy's refusals logged as `net.denied`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from egress_kit import (
    MiB,
    Site,
    TestCA,
    bare_repository,
    git_server,
    index_files,
    site,
)

from tether.parent.egress.addresses import NameTable
from tether.parent.egress.events import NetEvent
from tether.parent.egress.policy import Credential, NetworkPolicy, parse_destination
from tether.parent.egress.seat import PROXY_VARIABLES, TRUST_VARIABLES, EgressOptions
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.isolation import probe_host
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import Event
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import RunResult

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HERE = Path(__file__).parent
PROBES = HERE / "net_probes.py"
NET_CHILD = HERE / "net_child.py"
PY = sys.executable
FAST = DisposePolicy(shutdown=0.5, eof=1.0, term=1.0, kill=2.0)
TOKEN = "tok-c4n4ry-7f3a9b2e51d0"
WHY_NOT = probe_host().why_not
needs_sandbox = pytest.mark.skipif(WHY_NOT is not None, reason=f"no sandbox here: {WHY_NOT}")


@dataclass
class World:
    """The hosts a test plays: `plain` (http, pkg.test), `secure` (https, secure.test),
    `api` (https, api.test: the credential's destination), `other` (http, other.test:
    never allowed); each a loopback server the name table points at."""

    ca: TestCA
    plain: Site
    secure: Site
    api: Site
    other: Site
    names: NameTable

    def options(self) -> EgressOptions:
        return EgressOptions(resolver=self.names, upstream=self.ca.client_context())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    ca = TestCA(["pkg.test", "secure.test", "api.test", "other.test"])
    tls = ca.server_context(tmp_path)
    with (
        site("pkg.test") as plain,
        site("secure.test", tls) as secure,
        site("api.test", tls) as api,
        site("other.test") as other,
    ):
        names = NameTable(
            {n: "127.0.0.1" for n in ("pkg.test", "secure.test", "api.test", "other.test")},
            other={"self.test": "127.0.0.1"},
        )
        yield World(ca, plain, secure, api, other, names)


@dataclass
class Ran:
    result: RunResult
    report: dict[str, Any]
    events: list[Event]
    output: str

    @property
    def net(self) -> list[NetEvent]:
        return [e for e in self.events if isinstance(e, NetEvent)]


def workspace(tmp_path: Path, plan: list[list[Any]], ca: TestCA | None = None) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    shutil.copy(PROBES, ws / "net_probes.py")
    (ws / "plan.json").write_text(json.dumps(plan))
    if ca is not None:
        ca.write(ws / "testca.pem")
    return ws


def bash_turns(command: str) -> str:
    return json.dumps(
        {
            "turns": [
                {"text": "", "toolCalls": [{"name": "bash", "arguments": {"command": command}}]},
                {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "ok"}}]},
            ]
        }
    )


async def run_bash(
    ws: Path,
    command: str,
    *,
    network: object,
    options: EgressOptions | None,
    isolation: str = "sandbox",
    config: dict[str, Any] | None = None,
) -> Ran:
    """`command` through a scripted model's `bash` in a tether child of a run with
    `network`; its result, the probes' report (when it wrote one), events and output."""
    events: list[Event] = []
    cfg = ChildConfig(
        dispose=FAST,
        handshake_timeout=30.0,
        isolation=isolation,
        network=network,  # type: ignore[arg-type]
        **(config or {}),
    )
    async with Supervisor(cfg, egress=options) as sup:
        with anyio.fail_after(240):
            result = await sup.run(
                "probe",
                agent="tester",
                workspace=ws,
                model=ScriptedModel.from_json(bash_turns(command)),
                on_event=events.append,
            )
    output = next(
        (
            str(e.data.get("content", ""))
            for e in events
            if getattr(e, "kind", "") == "tool_result" and e.data.get("name") == "bash"  # type: ignore[union-attr]
        ),
        "",
    )
    report_file = ws / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    return Ran(result, report, events, output)


def probes(ws: Path) -> str:
    return f"{PY} net_probes.py plan.json report.json"


def refused(report: dict[str, Any], *names: str) -> dict[str, str]:
    """The probes among `names` that were not refused (empty when all were)."""
    return {
        n: report.get(n, "missing") for n in names if not report.get(n, "").startswith("refused")
    }


# --- from bash: allowed and denied ---------------------------------------------------------------


@needs_sandbox
async def test_from_bash_an_allowed_host_works_and_every_other_way_out_is_refused(
    tmp_path: Path, world: World
) -> None:
    plain, secure, other = world.plain, world.secure, world.other
    plan = [
        ["python_http", "fetch", [f"http://pkg.test:{plain.port}/hello"]],
        ["python_https", "fetch", [f"https://secure.test:{secure.port}/hello", "testca.pem"]],
        ["other_host", "fetch", [f"http://other.test:{other.port}/hello"]],
        ["other_port", "fetch", [f"http://pkg.test:{other.port}/hello"]],
        # An IP literal (TEST-NET-1: refused before any connection is tried), and loopback.
        ["ip_literal", "fetch", ["http://192.0.2.1/hello"]],
        [
            "ip_loopback",
            "raw",
            [
                f"GET http://127.0.0.1:{plain.port}/hello HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{plain.port}\r\nConnection: close\r\n\r\n"
            ],
        ],
        [
            "host_mismatch",
            "raw",
            [
                f"GET http://pkg.test:{plain.port}/hello HTTP/1.1\r\nHost: other.test\r\n"
                "Connection: close\r\n\r\n"
            ],
        ],
        [
            "sni_mismatch",
            "tls",
            ["secure.test", secure.port, "other.test", "testca.pem", "GET / HTTP/1.1\r\n\r\n"],
        ],
        [
            "connect_in_tunnel",
            "raw",
            [
                f"CONNECT pkg.test:{plain.port} HTTP/1.1\r\nHost: pkg.test\r\n\r\n"
                f"CONNECT other.test:{other.port} HTTP/1.1\r\nHost: other.test\r\n\r\n"
            ],
        ],
        ["connect_to_proxy", "raw", ["CONNECT {proxy} HTTP/1.1\r\nHost: {proxy}\r\n\r\n"]],
        ["connect_by_name", "raw", ["CONNECT self.test:443 HTTP/1.1\r\nHost: self.test\r\n\r\n"]],
        ["dns", "dns", ["pkg.test"]],
        ["dns_udp", "udp", ["127.0.0.53", 53]],
        ["direct", "direct", ["127.0.0.1", plain.port]],
        ["udp", "udp", ["127.0.0.1", plain.port]],
        ["bind", "bind", [47001]],
        ["unix", "unix", []],
    ]
    ws = workspace(tmp_path, plan, world.ca)
    allow = [f"pkg.test:{plain.port}", f"secure.test:{secure.port}", "self.test"]
    curl = f"curl -sS -m 20 http://pkg.test:{plain.port}/hello; curl -sS -m 20 http://other.test:{other.port}/"
    ran = await run_bash(ws, f"{probes(ws)}; {curl}", network=allow, options=world.options())
    r = ran.report
    assert ran.result.success, ran.result
    assert r["python_http"] == "ok: 200 hello from pkg.test\n"
    assert r["python_https"] == "ok: 200 hello from secure.test\n"
    assert "hello from pkg.test" in ran.output  # curl, through HTTP_PROXY
    assert "tether: network policy: other.test is not in the network policy" in ran.output
    assert (
        refused(r, "other_host", "other_port", "ip_literal", "ip_loopback", "host_mismatch") == {}
    )
    assert "other.test is not in the network policy" in r["other_host"]
    assert f"port {other.port} of pkg.test is not allowed" in r["other_port"]
    assert "IP address the network policy does not list" in r["ip_literal"]
    assert "IP address the network policy does not list" in r["ip_loopback"]
    assert "names another host" in r["host_mismatch"]
    assert (
        refused(r, "sni_mismatch", "connect_in_tunnel", "connect_to_proxy", "connect_by_name") == {}
    )
    assert "ACCESS_DENIED" in r["sni_mismatch"].upper()
    assert "CONNECT inside a tunnel" in r["connect_in_tunnel"]
    assert "loopback" in r["connect_by_name"]
    # What the sandbox refuses itself: no resolver, no route, no UDP, no listener, no UNIX.
    assert refused(r, "dns", "dns_udp", "direct", "udp", "bind", "unix") == {}
    assert world.other.seen == []  # the denied host heard nothing, by any way
    assert {s.path for s in world.plain.seen} == {"/hello"}
    assert [s.path for s in world.secure.seen] == ["/hello"]
    net = ran.result.isolation.network if ran.result.isolation else None
    assert net is not None and net.policy == "allowlist" and net.enforced in ("namespace", "port")
    assert net.allow == [f"pkg.test:{plain.port}", f"secure.test:{secure.port}", "self.test:443"]
    assert net.allowed >= 3 and net.denied >= 8 and net.bytes_down > 0
    kinds = {(e.kind, e.host) for e in ran.net}
    assert ("net.allowed", "pkg.test") in kinds and ("net.allowed", "secure.test") in kinds
    assert ("net.denied", "other.test") in kinds and ("net.denied", "127.0.0.1") in kinds
    assert all(e.run_id == ran.result.run_id for e in ran.net)


@needs_sandbox
async def test_a_protocol_child_reaches_an_allowed_host_and_is_refused_another(
    tmp_path: Path, world: World
) -> None:
    plan = [
        ["allowed", "fetch", [f"http://pkg.test:{world.plain.port}/hello"]],
        ["denied", "fetch", [f"http://other.test:{world.other.port}/hello"]],
        ["direct", "direct", ["127.0.0.1", world.other.port]],
    ]
    ws = workspace(tmp_path, plan)
    cfg = ChildConfig(
        isolation="sandbox",
        dispose=FAST,
        handshake_timeout=30.0,
        network=[f"pkg.test:{world.plain.port}"],
    )
    async with Supervisor(cfg, egress=world.options()) as sup:
        with anyio.fail_after(120):
            result = await sup.run("probe", workspace=ws, command=[PY, str(NET_CHILD)])
    assert result.success, result
    report = json.loads((ws / "report.json").read_text())
    assert report["allowed"] == "ok: 200 hello from pkg.test\n"
    assert refused(report, "denied", "direct") == {}
    assert world.other.seen == []


@needs_sandbox
async def test_pip_installs_a_package_from_a_local_index_through_the_proxy(
    tmp_path: Path, world: World
) -> None:
    world.plain.files.update(index_files("tinypkg"))
    ws = workspace(tmp_path, [])
    index = f"http://pkg.test:{world.plain.port}/simple/"
    command = (
        f"{PY} -m pip install --disable-pip-version-check --no-cache-dir --index-url {index} "
        f"--trusted-host pkg.test --target site tinypkg 2>&1 | tail -3; "
        f"PYTHONPATH=site {PY} -c 'import tinypkg; print(tinypkg.VALUE)'"
    )
    ran = await run_bash(
        ws, command, network=[f"pkg.test:{world.plain.port}"], options=world.options()
    )
    assert "Successfully installed tinypkg-1.0" in ran.output, ran.output
    assert "from the local index 1.0" in ran.output
    assert {"/simple/tinypkg/", "/files/tinypkg-1.0-py3-none-any.whl"} <= {
        s.path for s in world.plain.seen
    }


@needs_sandbox
async def test_git_clones_over_smart_http_through_the_proxy(tmp_path: Path, world: World) -> None:
    root = tmp_path / "git"
    root.mkdir()
    bare_repository(root)
    names = NameTable({"git.test": "127.0.0.1"})
    with git_server(root) as port:
        ws = workspace(tmp_path, [])
        command = (
            f"git clone -q http://git.test:{port}/project.git cloned 2>&1 && cat cloned/README && "
            f"git -C cloned log --oneline | wc -l"
        )
        ran = await run_bash(
            ws, command, network=[f"git.test:{port}"], options=EgressOptions(resolver=names)
        )
    assert "cloned through the proxy" in ran.output, ran.output
    assert (ws / "cloned" / ".git").is_dir()
    assert any(e.kind == "net.allowed" and e.host == "git.test" for e in ran.net)


# --- credentials ----------------------------------------------------------------------------------


@needs_sandbox
async def test_an_injected_credential_reaches_the_server_and_nowhere_in_the_childs_view(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXAMPLE_TOKEN", TOKEN)
    api = world.api
    request = (
        "GET /echo HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer child-made-up\r\n"
        "Connection: close\r\n\r\n"
    )
    plan = [
        ["via_tls", "tls", ["api.test", api.port, "api.test", "$TRUST", request]],
        ["via_urllib", "fetch", [f"https://api.test:{api.port}/hello"]],
        ["seen", "seen", ["seen.txt"]],
    ]
    ws = workspace(tmp_path, plan)
    (ws / "plan.json").write_text(json.dumps(plan).replace("$TRUST", "TRUST_FILE"))
    command = (
        f'sed -i "s#TRUST_FILE#$SSL_CERT_FILE#" plan.json && {probes(ws)}; '
        f"curl -sS -m 20 https://api.test:{api.port}/hello"
    )
    dest = parse_destination(f"api.test:{api.port}", Credential(env="EXAMPLE_TOKEN"))
    ran = await run_bash(ws, command, network=NetworkPolicy((dest,)), options=world.options())
    assert ran.result.success, ran.result
    r = ran.report
    assert r["via_tls"].startswith("ok: HTTP/1.1 200"), r["via_tls"]
    assert r["via_urllib"] == "ok: 200 hello from api.test\n"
    assert "hello from api.test" in ran.output  # curl, trusting the run's CA
    # The server got the real credential, every time, in place of what the child sent.
    assert [s.headers.get("authorization") for s in api.seen] == [f"Bearer {TOKEN}"] * 3
    # The child sent its own made-up header, and nowhere in its view is the token.
    assert r["sent"] == [request]
    seen = (ws / "seen.txt").read_bytes()
    assert len(seen) > 10_000 and b"SSL_CERT_FILE" in seen
    for where in (seen, json.dumps(r).encode(), ran.output.encode()):
        assert TOKEN.encode() not in where
    assert "EXAMPLE_TOKEN" not in r["environ"]
    # Every client's own variable names the proxy and, with a credential, the run's CA.
    env = r["environ"]
    assert {env[name] for name in PROXY_VARIABLES} == {env["HTTPS_PROXY"]}
    assert env["HTTPS_PROXY"].startswith("http://127.0.0.1:")
    assert {env[name] for name in TRUST_VARIABLES} == {env["SSL_CERT_FILE"]}
    assert env["NO_PROXY"] == env["no_proxy"] == ""  # nothing goes around the proxy


async def test_a_credential_the_childs_environment_would_carry_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = parse_destination("api.example.com", Credential(env="EXAMPLE_TOKEN"))
    policy = NetworkPolicy((dest,))
    async with Supervisor(ChildConfig(network=policy)) as sup:
        with pytest.raises(ValueError, match=r"\$EXAMPLE_TOKEN is not set"):
            await sup.start("x", workspace=tmp_path, command=[PY, "-c", "pass"])
        monkeypatch.setenv("EXAMPLE_TOKEN", TOKEN)
        passed = ChildConfig(network=policy, pass_env=("EXAMPLE_TOKEN",))
        with pytest.raises(ValueError, match=r"would reach the child's environment"):
            await sup.start("x", workspace=tmp_path, command=[PY, "-c", "pass"], config=passed)
        copied = ChildConfig(network=policy, env={"SOME_VAR": f"x{TOKEN}"})
        with pytest.raises(ValueError, match=r"\(SOME_VAR\)"):
            await sup.start("x", workspace=tmp_path, command=[PY, "-c", "pass"], config=copied)


# --- bounds and the end of a run ----------------------------------------------------------------


@needs_sandbox
async def test_a_run_past_its_byte_limit_ends_as_net_limit(tmp_path: Path, world: World) -> None:
    policy = NetworkPolicy((parse_destination(f"pkg.test:{world.plain.port}"),), max_bytes_down=MiB)
    ws = workspace(tmp_path, [])
    url = f"http://pkg.test:{world.plain.port}/bytes/{16 * MiB}"
    ran = await run_bash(
        ws, f"curl -sS -m 60 -o big {url}; sleep 30", network=policy, options=world.options()
    )
    failure = ran.result.failure
    assert failure is not None and failure.kind == "net_limit", ran.result
    assert failure.limit == f"net_bytes_down={MiB}"
    assert "network limit" in ran.result.message
    assert ran.result.isolation is not None
    assert ran.result.isolation.network.limits_hit == [f"net_bytes_down={MiB}"]


async def test_the_runs_proxy_and_its_ca_are_gone_when_the_run_ends(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the process level the proxy listens on a loopback port of the run's own: once the
    run ends nothing answers there, the proxy is revoked and the trust directory is gone."""
    monkeypatch.setenv("EXAMPLE_TOKEN", TOKEN)
    dest = parse_destination(f"api.test:{world.api.port}", Credential(env="EXAMPLE_TOKEN"))
    ws = workspace(tmp_path, [])
    cfg = ChildConfig(isolation="process", dispose=FAST, network=NetworkPolicy((dest,)))
    async with Supervisor(cfg, egress=world.options()) as sup:
        with anyio.fail_after(120):
            handle = await sup.start(
                "probe",
                agent="tester",
                workspace=ws,
                model=ScriptedModel.from_json(
                    bash_turns('echo "$HTTPS_PROXY $SSL_CERT_FILE" > where.txt')
                ),
            )
            result = await handle.result()
            await handle.wait()
    assert result.success, result
    proxy_url, trust = (ws / "where.txt").read_text().split()
    assert result.isolation is not None and result.isolation.network.enforced == "none"
    assert result.isolation.warning and "not enforced" in result.isolation.warning
    egress = handle.egress
    assert egress is not None and egress.proxy.revoked == "the run has ended"
    assert egress.proxy.secrets == {} and not os.path.exists(os.path.dirname(trust))
    port = int(proxy_url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


async def test_without_a_policy_a_run_has_no_network_and_its_result_says_none(
    tmp_path: Path, world: World
) -> None:
    ws = workspace(tmp_path, [])
    ran = await run_bash(
        ws,
        f"env | grep -ci proxy; curl -sS -m 5 http://127.0.0.1:{world.plain.port}/hello",
        network="none",
        options=world.options(),
        isolation="auto",
    )
    assert ran.result.isolation is not None
    assert (
        ran.result.isolation.network.policy == "none" and ran.result.isolation.network.allow == []
    )
    assert ran.net == []
    if ran.result.isolation.level == "sandbox":
        assert "hello from" not in ran.output and world.plain.seen == []
        assert ran.output.splitlines()[1] == "0", ran.output  # no proxy variable at all
