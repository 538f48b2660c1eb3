"""UNIX sockets in the sandbox: what the run binds itself (in its private temp dirs, in its
workspace) is reachable by every process of the run — a multiprocessing Manager, a
ProcessPoolExecutor with the forkserver context, a small socket server and its client, in a
protocol child and in the built-in agent's `bash` — and what is bound outside stays
unreachable: the host's /run and /tmp, a directory the run may read, another run's private
temp dir and workspace, abstract sockets of the host and of another run.

Local sockets need a host whose sandbox can keep both promises (`probe_host().local_sockets`:
a root supervisor's sealed private mounts and Landlock ABI 6, or Landlock ABI 9); elsewhere
`connect` is refused outright, which the last test checks.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from sandbox_targets import PY, config, needs_sandbox, run_bash

from tether.parent.process.isolation import probe_host
from tether.parent.supervisor import Supervisor

HERE = Path(__file__).parent
PROBE = HERE / "sockets_probe.py"
CHILD = HERE / "local_sockets_child.py"
CHILDREN = HERE.parent / "children"
HOST = probe_host()
needs_local_sockets = pytest.mark.skipif(
    not HOST.local_sockets, reason=f"no local sockets here: {HOST.local_sockets_why}"
)
pytestmark = [pytest.mark.anyio, needs_sandbox]
WORKED = ("manager", "forkserver_pool", "socket_in_tmp", "socket_in_workspace")


def _workspace(tmp_path: Path, name: str = "ws") -> Path:
    ws = tmp_path / name
    ws.mkdir()
    shutil.copy2(PROBE, ws / "sockets_probe.py")
    return ws


@needs_local_sockets
@pytest.mark.parametrize("spawner", ["exec", "zygote"])
async def test_a_manager_a_forkserver_pool_and_a_socket_server_work_from_bash(
    tmp_path: Path, spawner: str
) -> None:
    ws = _workspace(tmp_path)
    async with Supervisor(config(spawner=spawner, isolation="sandbox")) as sup:
        with anyio.fail_after(120):
            result, out = await run_bash(sup, ws, f"{PY} sockets_probe.py work")
    assert result.success, result
    got = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert {k: v for k, v in got.items() if not v.startswith("ok")} == {}, got
    assert got["manager"] == "ok: {'x': 42}" and got["forkserver_pool"] == "ok: [1, 2, 3]"
    assert got["socket_in_tmp"] == got["socket_in_workspace"] == "ok: b'ping'"


@needs_local_sockets
async def test_a_protocol_child_uses_a_manager_a_forkserver_pool_and_its_own_socket_server(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    cfg = config(isolation="sandbox", read_paths=[str(CHILDREN), str(HERE)])
    async with Supervisor(cfg) as sup:
        with anyio.fail_after(120):
            result = await sup.run("work", workspace=ws, command=[PY, "-I", str(CHILD)])
    assert result.success and result.summary == "worked", result
    got = json.loads((ws / "work.json").read_text())
    assert set(got) == set(WORKED)
    assert {k: v for k, v in got.items() if not v.startswith("ok")} == {}, got


@pytest.fixture
def host_sockets(tmp_path: Path) -> Iterator[dict[str, str]]:
    """World-writable sockets a sandboxed run must not reach: in the host's /run, in a
    directory of the host's /tmp, in a directory the run is granted to read, and an abstract
    one; all listening, so a connect that got through would succeed."""
    run_dir = Path(tempfile.mkdtemp(prefix="tether-test-", dir="/run"))
    tmp_dir = Path(tempfile.mkdtemp(prefix="tether-test-"))
    readable = tmp_path / "readable"
    readable.mkdir()
    socks = []
    paths = {
        "host_run": run_dir / "s.sock",
        "host_tmp": tmp_dir / "s.sock",
        "readable_dir": readable / "s.sock",
    }
    for d in (run_dir, tmp_dir, readable):
        d.chmod(0o755)
    try:
        for path in paths.values():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(str(path))
            s.listen()
            path.chmod(0o777)
            socks.append(s)
        name = f"tether-test-host-{os.getpid()}-{os.urandom(4).hex()}"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\0" + name)
        s.listen()
        socks.append(s)
        yield {**{k: str(v) for k, v in paths.items()}, "host_abstract": "\0" + name}
        for s in socks:  # nothing connected
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.accept()
    finally:
        for s in socks:
            s.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(tmp_dir, ignore_errors=True)


@needs_local_sockets
async def test_sockets_bound_outside_the_run_stay_unreachable(
    tmp_path: Path, host_sockets: dict[str, str]
) -> None:
    """Another run holds sockets in its private /tmp, its workspace and the abstract space
    while this run tries each of them, and every host socket."""
    held, probing = _workspace(tmp_path, "held"), _workspace(tmp_path, "probing")
    name = f"tether-test-run-{os.urandom(4).hex()}"
    cfg = config(isolation="sandbox", read_paths=[str(Path(host_sockets["readable_dir"]).parent)])
    # The other run is another supervisor's, as another program on this host would start it.
    async with (
        Supervisor(cfg) as sup,
        Supervisor(cfg) as other,
        anyio.create_task_group() as tg,
    ):

        async def hold() -> None:
            await run_bash(other, held, f"{PY} sockets_probe.py serve {held} {name}")

        with anyio.fail_after(120):
            tg.start_soon(hold)
            while not (held / "ready").exists():
                await anyio.sleep(0.05)
            pid = int((held / "ready").read_text())
            targets = {
                **host_sockets,
                "other_run_tmp": f"/proc/{pid}/root/tmp/held.sock",
                "other_run_workspace": str(held / "held.sock"),
                "other_run_abstract": "\0" + name,
            }
            (probing / "targets.json").write_text(json.dumps(targets))
            result, out = await run_bash(sup, probing, f"{PY} sockets_probe.py probe targets.json")
            (held / "stop").write_text("")
    assert result.success, result
    got = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert set(got) == set(targets)
    assert {k: v for k, v in got.items() if not v.startswith("refused")} == {}, got
    assert json.loads((held / "heard.json").read_text()) == []
    # The host's sockets the run could see are refused by permission, not by their absence.
    assert got["host_run"] == got["readable_dir"] == "refused: EACCES", got
    assert got["host_abstract"] == got["other_run_abstract"] == "refused: EPERM", got


async def test_without_local_sockets_connect_is_refused_outright(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that cannot keep the promise (here: told so) refuses every `connect`, its
    run's own sockets included: the Manager fails with EACCES rather than anything reaching
    outside."""
    from tether.parent.process import isolation

    monkeypatch.setitem(
        isolation._probes.answers,
        os.environ.get(isolation.FORCE_ABI_ENV, ""),
        isolation.HostIsolation(
            root=HOST.root,
            landlock_abi=HOST.landlock_abi,
            why_not=None,
            local_sockets=False,
            local_sockets_why="refused: told so by the test",
        ),
    )
    ws = _workspace(tmp_path)
    async with Supervisor(config(isolation="sandbox")) as sup:
        with anyio.fail_after(120):
            _, out = await run_bash(
                sup, ws, f"{PY} sockets_probe.py work socket_in_tmp socket_in_workspace manager"
            )
    got = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert got["socket_in_tmp"] == got["socket_in_workspace"] == "refused: EACCES", got
    assert not got["manager"].startswith("ok"), got
