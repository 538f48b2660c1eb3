"""The session store against a hostile sandboxed child (issue 30, break 7): a child that goes
after its own stored session (to point its model at a listener, so the user's next resume
sends the key there) finds the store nowhere it can reach — never in a workspace (a workspace
that holds the store, the default one under HOME included, is refused before anything
starts), and covered in its sandbox wherever else it lies."""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from sandbox_targets import not_refused

from tether.contain.plan import Plan
from tether.parent import ChildConfig, Supervisor
from tether.parent.process.isolation import (
    HostIsolation,
    deny_problem,
    plan_for,
    probe_host,
)

pytestmark = pytest.mark.anyio

CHILDREN = Path(__file__).resolve().parents[1] / "children"
ATTACKS = ("list_state", "read_db", "rewrite_model", "plant_file")
SANDBOX = ChildConfig(isolation="sandbox")
CANARY = "sk-canary-store-0123456789"
needs_sandbox = pytest.mark.skipif(
    probe_host().why_not is not None, reason=f"no sandbox here: {probe_host().why_not}"
)


class Listener:
    """A TCP listener on 127.0.0.1 that records what each connection sends and answers HTTP
    500: where a rewritten model string would send the user's key."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.heard: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.heard.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 500 Nope\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        # Closing the socket does not wake a thread blocked in its `accept()`; shutting it
        # down does (the join waited its whole deadline before).
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(5)
        assert not self._thread.is_alive(), "the listener's thread did not end"


@pytest.fixture
def listener() -> Iterator[Listener]:
    got = Listener()
    yield got
    got.close()


def scripted(path: Path) -> str:
    path.write_text(json.dumps([{"text": "fine", "toolCalls": []}] * 4))
    return f"scripted:{path}"


def hostile_child(where: Path) -> list[str]:
    """The hostile child copied to `where` (with the wire helper it imports)."""
    where.mkdir(parents=True, exist_ok=True)
    for name in ("store_rewriter.py", "_wire.py"):
        shutil.copy(CHILDREN / name, where / name)
    return [sys.executable, "-I", str(where / "store_rewriter.py")]


def aim(ws: Path, state: Path, listener: Listener) -> None:
    model = f"openai:x@http://127.0.0.1:{listener.port}/v1"
    (ws / "targets.json").write_text(json.dumps({"state": str(state), "model": model}))


@needs_sandbox
async def test_a_hostile_child_is_never_started_where_the_workspace_holds_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: Listener
) -> None:
    """As in the issue: the workspace is HOME, the store the default under it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    state = home / ".local" / "state" / "tether"
    aim(home, state, listener)
    async with Supervisor(SANDBOX) as sup:
        with pytest.raises(ValueError) as refused:
            await sup.spawn_agent(
                "go",
                workspace=home,
                command=hostile_child(tmp_path / "code"),
                model=scripted(tmp_path / "model.json"),
                keep_alive=0,
            )
    message = str(refused.value)
    assert f"directory {state} (the default" in message
    assert f"lies inside the workspace {home}" in message
    assert not (home / "report.json").exists()  # the child never ran
    assert not (home / ".local").exists()  # nothing was stored
    assert listener.heard == []


async def test_a_workspace_inside_the_state_directory_is_refused_as_well(tmp_path: Path) -> None:
    state = tmp_path / "state"
    ws = state / "project"
    ws.mkdir(parents=True)
    async with Supervisor(state_dir=state) as sup:
        with pytest.raises(ValueError, match=f"the workspace {ws} lies inside the session store"):
            await sup.spawn_agent("go", workspace=ws, model="scripted:/nowhere.json")
    assert list(state.iterdir()) == [ws]  # no database was made


@needs_sandbox
@pytest.mark.parametrize("layout", ["apart", "beside_the_childs_code"])
async def test_a_hostile_sandboxed_child_cannot_reach_its_session_store_whatever_the_layout(
    tmp_path: Path, listener: Listener, layout: str
) -> None:
    """`apart`: the store is nowhere the sandbox grants; `beside_the_childs_code`: it lies in
    the directory of the child's own script, which the sandbox grants for reading (there, the
    mount that covers it keeps the child out, beside the directory's own 0700)."""
    project = tmp_path / "project"
    command = hostile_child(project)
    state = tmp_path / "state" if layout == "apart" else project / ".state"
    state.mkdir()
    state.chmod(0o700)  # the store refuses one open to others (docs/sessions.md)
    ws = tmp_path / "ws"
    ws.mkdir()
    aim(ws, state, listener)
    model = scripted(tmp_path / "model.json")
    async with Supervisor(SANDBOX, state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "go", workspace=ws, command=command, model=model, keep_alive=0
        )
        first = await agent.result()
    assert first.success and first.summary == "attacked; model answered", first
    report = json.loads((ws / "report.json").read_text())
    assert sorted(report) == sorted(ATTACKS)
    assert not_refused(report, ATTACKS) == {}
    assert not (state / "planted").exists()
    # The user resumes it later, with their key in the environment: it runs on the model it
    # was started with, and nothing reaches the listener.
    env = {**os.environ, "OPENAI_API_KEY": CANARY}
    argv = [sys.executable, "-m", "tether.parent.cli", "agents", "send", agent.id, "more"]
    argv += ["--state", str(state), "--json", "--quiet"]
    run = functools.partial(
        subprocess.run, argv, capture_output=True, text=True, timeout=90, env=env, check=False
    )
    sent = await anyio.to_thread.run_sync(run)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["summary"] == "attacked; model answered"
    assert listener.heard == []


# --- the plan: what is covered, and what cannot be -------------------------------------------

ROOT = HostIsolation(root=True, landlock_abi=6, why_not=None)


def test_a_root_sandbox_covers_every_denied_directory_but_one_that_holds_the_workspace(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    store = tmp_path / "state"
    (tmp_path / "link").symlink_to(store)
    setup = plan_for(
        "sandbox",
        command=["/bin/true"],
        workspace=str(ws),
        host=ROOT,
        deny_paths=[str(tmp_path / "link"), str(tmp_path)],
        interpreter=False,
    )
    assert isinstance(setup.plan, Plan)
    # The path as given and as resolved; never the directory that holds the workspace.
    assert setup.plan.hide == sorted([str(tmp_path / "link"), str(store)])
    assert Plan.from_json(setup.plan.to_json()).hide == setup.plan.hide


@pytest.mark.parametrize("can_cover", [True, False])
def test_a_denied_directory_that_a_grant_reaches_is_refused_where_nothing_can_cover_it(
    tmp_path: Path, can_cover: bool
) -> None:
    ws = tmp_path / "ws"
    code = tmp_path / "code"
    for d in (ws, code, code / "state"):
        d.mkdir()
    (code / "child.py").write_text("")
    command = [sys.executable, str(code / "child.py")]  # grants code/ for reading

    def problem(denied: Path) -> str | None:
        return deny_problem([str(denied)], command=command, workspace=str(ws), can_cover=can_cover)

    assert problem(tmp_path / "elsewhere") is None
    inside_a_grant = problem(code / "state")
    assert (inside_a_grant is None) == can_cover
    if inside_a_grant is not None:
        assert f"{code / 'state'} must be kept from sandboxed children" in inside_a_grant
        assert f"lies inside {code}" in inside_a_grant
    in_shared_memory = problem(Path("/dev/shm/tether-state"))
    assert (in_shared_memory is None) == can_cover
    in_the_workspace = problem(ws / "state")
    assert (in_the_workspace is None) == can_cover
    holds_the_workspace = problem(tmp_path)
    assert holds_the_workspace is not None and f"holds the workspace {ws}" in holds_the_workspace
