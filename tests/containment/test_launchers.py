"""Launchers: golden argv for the remote ones, a real bubblewrap sandbox, and teardown through
the EOF lifeline alone (a relay standing in for ssh)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import psutil
import pytest

from tether.parent.process.launchers import (
    Bwrap,
    Docker,
    Kubectl,
    LaunchContext,
    Local,
    Prlimit,
    Setpriv,
    Ssh,
    resolve_launcher,
)
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent
FAST = ChildConfig(dispose=DisposePolicy(shutdown=0.3, eof=1.0, term=0.5, kill=1.0))
CTX = LaunchContext(
    command=["python3", "-I", "-m", "tether.child"],
    env={"PATH": "/usr/bin", "TETHER_TREE": "1-x-1"},
    explicit_env={"MODE": "a b"},
    workspace="/srv/ws",
    limits=Limits(memory="512M", processes=64, cpu=10),
)


def _bwrap_works() -> str | None:
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (Debian package bubblewrap; scripts/test installs it)"
    got = subprocess.run(
        ["bwrap", "--unshare-net", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        timeout=10,
    )
    if got.returncode != 0:
        return f"bwrap cannot create namespaces here: {got.stderr.decode().strip()}"
    return None


needs_bwrap = pytest.mark.skipif(_bwrap_works() is not None, reason=str(_bwrap_works()))


def py(code: str) -> list[str]:
    return [sys.executable, "-I", "-c", code]


def test_local_is_the_command_as_is_and_provides_nothing() -> None:
    assert Local().argv(CTX) == CTX.command
    assert Local().provides == dataclasses.replace(Local().provides)
    assert not Local().provides.network_isolation and not Local().provides.limits


def test_ssh_runs_one_quoted_remote_command_without_a_tty() -> None:
    assert Ssh(host="build@box").argv(CTX) == [
        "ssh",
        "-T",
        "-o",
        "BatchMode=yes",
        "--",
        "build@box",
        "cd /srv/ws && exec env 'MODE=a b' python3 -I -m tether.child",
    ]
    assert Ssh(host="h").provides.eof_teardown_only


def test_docker_runs_interactive_and_removed_with_its_limits_and_no_network() -> None:
    assert Docker(image="py:3.12").argv(CTX) == [
        "docker",
        "run",
        "-i",
        "--rm",
        "--init",
        "--network",
        "none",
        "--memory",
        str(512 << 20),
        "--memory-swap",
        str(512 << 20),
        "--pids-limit",
        "64",
        "-v",
        "/srv/ws:/srv/ws",
        "-w",
        "/srv/ws",
        "-e",
        "MODE",
        "py:3.12",
        "python3",
        "-I",
        "-m",
        "tether.child",
    ]
    provides = Docker(image="x").provides
    assert provides.network_isolation and provides.eof_teardown_only
    assert provides.limits == {"memory", "processes", "cpu"}


def test_kubectl_runs_an_interactive_pod_that_is_removed_and_never_restarted() -> None:
    argv = Kubectl(image="py:3.12").argv(CTX)
    assert argv[:8] == [
        "kubectl",
        "run",
        "tether-child",
        "-i",
        "--rm",
        "--restart=Never",
        "--quiet",
        "--image=py:3.12",
    ]
    assert "--env=MODE=a b" in argv
    assert any(a.startswith("--overrides=") and '"memory": "536870912"' in a for a in argv)
    assert argv[-5:] == ["--", "python3", "-I", "-m", "tether.child"]


def test_prlimit_and_setpriv_wrap_the_command() -> None:
    assert Prlimit().argv(CTX) == [
        "prlimit",
        "--core=0",
        "--cpu=10:11",
        f"--data={512 << 20}:{512 << 20}",
        "--nproc=64:64",
        "--",
        *CTX.command,
    ]
    assert Setpriv(user="nobody").argv(CTX) == [
        "setpriv",
        "--no-new-privs",
        "--reuid=nobody",
        "--regid=nobody",
        "--clear-groups",
        "--",
        *CTX.command,
    ]


def test_bwrap_clears_the_environment_and_sets_exactly_ours() -> None:
    argv = Bwrap().argv(CTX)
    assert "--clearenv" in argv and "--unshare-net" in argv and "--die-with-parent" in argv
    sets = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "--setenv"}
    assert sets == dict(CTX.env)
    assert argv[argv.index("--chdir") + 1] == "/srv/ws"
    assert argv[-5:] == ["--", *CTX.command]


@pytest.mark.parametrize("bad", ["nope", "ssh", "docker:", "local:x"])
def test_an_unknown_launcher_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="launcher"):
        resolve_launcher(bad)


async def test_an_unknown_launcher_is_refused_at_start(tmp_path: Path) -> None:
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match="launcher"):
            await sup.start("go", workspace=tmp_path, config=ChildConfig(launcher="jail"))


# --- the EOF lifeline alone ------------------------------------------------------------------


async def test_a_far_child_behind_a_byte_relay_goes_on_eof_alone(
    tmp_path: Path, thread_runs: Callable[[int], bool]
) -> None:
    # The relay stands in for ssh: the far child is in a session of its own without our tree
    # marker, ignores SIGTERM, and exits only when its stdin ends.
    pid_file = tmp_path / "far.pid"
    far = py(
        "import os, signal, sys\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "sys.stdin.buffer.read()\n"
    )
    relay = Ssh(host="far-host", program_argv=(sys.executable, "-I", str(HERE / "relay.py")))
    config = dataclasses.replace(FAST, launcher=relay, command=tuple(far))
    async with Supervisor(config) as sup:
        result = await sup.run("go", workspace=tmp_path, limits=Limits(wall="1s"))
    assert result.failure is not None and result.failure.kind == "timeout", result
    assert result.failure.rung == "exit"  # no signal was needed, nor could have reached it
    far_pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(far_pid) and time.monotonic() < deadline:
        await anyio.sleep(0.02)
    assert not thread_runs(far_pid)


# --- bubblewrap, for real --------------------------------------------------------------------


@needs_bwrap
async def test_a_bwrap_child_cannot_reach_a_server_on_the_hosts_loopback(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
        "    outcome = 'connected'\n"
        "except OSError as exc:\n"
        "    outcome = f'blocked: {exc}'\n"
        "open('outcome', 'w').write(outcome)\n"
        "raise SystemExit(3)\n"
    )
    try:
        outcomes = {}
        # The local child runs with process isolation: it shows the server is there for a
        # child that may look; bwrap blocks it by itself, and with the sandbox inside it.
        for launcher, isolation in (("local", "process"), ("bwrap", "process"), ("bwrap", "auto")):
            ws = tmp_path / f"{launcher}-{isolation}"
            ws.mkdir()
            code_here = code.replace("'outcome'", repr(str(ws / "outcome")))
            config = dataclasses.replace(FAST, launcher=launcher, isolation=isolation)
            async with Supervisor(config) as sup:
                result = await sup.run("go", workspace=ws, command=py(code_here))
            assert result.failure is not None and result.failure.kind == "exit_nonzero", result
            outcomes[launcher, isolation] = (ws / "outcome").read_text()
    finally:
        server.close()
    assert outcomes["local", "process"] == "connected"
    assert outcomes["bwrap", "process"].startswith("blocked")
    assert outcomes["bwrap", "auto"].startswith("blocked")


@needs_bwrap
async def test_a_bwrap_child_writes_only_inside_its_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    code = (
        "import os\n"
        "seen = []\n"
        f"for target in ({str(outside / 'x')!r}, '/etc/tether-x', {str(Path.home() / 'tx')!r},"
        f" {str(ws / 'inside')!r}):\n"
        "    try:\n"
        "        open(target, 'w').write('x')\n"
        "        seen.append(f'{target}: written')\n"
        "    except OSError as exc:\n"
        "        seen.append(f'{target}: {exc.strerror}')\n"
        f"open({str(ws / 'report')!r}, 'w').write('\\n'.join(seen))\n"
        "raise SystemExit(3)\n"
    )
    async with Supervisor(dataclasses.replace(FAST, launcher="bwrap")) as sup:
        result = await sup.run("go", workspace=ws, command=py(code))
    assert result.failure is not None and result.failure.kind == "exit_nonzero", result
    report = (ws / "report").read_text()
    assert (ws / "inside").read_text() == "x"
    assert not (outside / "x").exists()  # /tmp in the sandbox is its own tmpfs
    assert not Path("/etc/tether-x").exists()
    assert not (Path.home() / "tx").exists()
    assert "/etc/tether-x: Read-only file system" in report or "No such file" in report


@needs_bwrap
async def test_a_bwrap_childs_whole_tree_is_gone_after_dispose(tmp_path: Path) -> None:
    token = f"{4000 + os.getpid() % 1000}.5"
    code = (
        "import subprocess\n"
        f"subprocess.Popen(['setsid', 'sleep', {token!r}])\n"
        f"subprocess.Popen(['sleep', {token!r}])\n"
        "import time; time.sleep(60)\n"
    )
    try:
        async with Supervisor(dataclasses.replace(FAST, launcher="bwrap")) as sup:
            result = await sup.run(
                "go", workspace=tmp_path, command=py(code), limits=Limits(wall="1s")
            )
        assert result.failure is not None and result.failure.kind == "timeout", result
        assert _with_token(token) == []
    finally:
        _kill_token(token)


@needs_bwrap
def test_killing_the_bwrap_process_kills_the_sandboxed_tree(tmp_path: Path) -> None:
    token = f"{5000 + os.getpid() % 1000}.5"
    ctx = LaunchContext(
        command=["sh", "-c", f"setsid sleep {token} & sleep {token} & wait"],
        env={"PATH": "/usr/bin:/bin"},
        explicit_env={},
        workspace=str(tmp_path),
        limits=Limits(),
    )
    proc = subprocess.Popen(Bwrap().argv(ctx), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while len(_with_token(token)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_with_token(token)) == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=5)
        deadline = time.monotonic() + 5
        while _with_token(token) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _with_token(token) == []
    finally:
        proc.kill()
        proc.wait(timeout=5)
        _kill_token(token)


def _with_token(token: str) -> list[int]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if token in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p.pid)
    return found


def _kill_token(token: str) -> None:
    for pid in _with_token(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_one_registry_names_every_launcher_for_the_resolver_the_cli_and_doctor() -> None:
    from tether.parent.cli.doctor import report
    from tether.parent.process.launchers import LAUNCHERS, launcher_usages

    for kind in LAUNCHERS.values():
        built = resolve_launcher(f"{kind.name}:x" if kind.argument else kind.name)
        assert built.name == kind.name
    assert list(report()["launchers"]) == launcher_usages()
    helped = subprocess.run(
        [sys.executable, "-m", "tether.parent.cli", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    flat = "".join(helped.split())  # argparse wraps lines, also at hyphens
    assert all(usage in flat for usage in launcher_usages())
