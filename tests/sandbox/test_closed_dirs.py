"""Agent files, `command=` scripts and `read_paths` entries in directories the sandbox's uid
cannot enter (a 0700 directory, what `mkdtemp` makes; a 0700 home): the named file works —
the closed directory is rebuilt in the sandbox's private mounts with only what the run names
inside it (the file, the workspace beside it), never the rest — and what the sandbox still
could not read (a file or a `read_paths` directory closed by its own mode) is refused before
anything is spawned, with a message naming the path and the fix."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from sandbox_targets import PY, config, needs_root, needs_sandbox

from tether.parent.supervisor import Supervisor

pytestmark = [pytest.mark.anyio, needs_sandbox, needs_root]
CHILDREN = Path(__file__).resolve().parent.parent / "children"
AGENT = """
import os
from tether.child.agent import Finished


class Peek:
    def __init__(self, params):
        self.workspace = params.workspace

    async def run(self, ctx):
        here = os.path.dirname(os.path.abspath(__file__))
        secret = os.path.exists(os.path.join(here, "secret.txt"))
        return Finished(summary=f"ran in {self.workspace}; secret visible: {secret}", message="")


def make(params):
    return Peek(params)
"""
CHILD = """
import os, sys
sys.path.insert(0, sys.argv[1])
import _wire
here = os.path.dirname(os.path.abspath(__file__))
run = _wire.wait_run()
secret = os.path.exists(os.path.join(here, "secret.txt"))
_wire.reply(run["id"], _wire.run_result(summary=f"script ran; secret visible: {secret}"))
_wire.serve_until_exit()
"""


def _closed(where: Path) -> Path:
    """A 0700 directory holding an agent, a protocol child script and a secret."""
    where.mkdir(mode=0o700)
    where.chmod(0o700)
    (where / "agent.py").write_text(AGENT)
    (where / "child.py").write_text(CHILD)
    (where / "secret.txt").write_text("not for the sandbox")
    for name in ("agent.py", "child.py", "secret.txt"):
        (where / name).chmod(0o644)
    return where


async def _run_agent(agent: Path, workspace: Path, **cfg: object) -> tuple[bool, str, str]:
    async with Supervisor(config(isolation="sandbox", **cfg)) as sup:
        with anyio.fail_after(60):
            result = await sup.run("go", agent=f"{agent}:make", workspace=workspace)
    return result.success, result.summary or "", result.message or ""


async def test_an_agent_file_in_a_0700_dir_with_the_workspace_beside_it_runs(
    tmp_path: Path,
) -> None:
    closed = _closed(tmp_path / "d")
    (closed / "ws").mkdir()
    ok, summary, message = await _run_agent(closed / "agent.py", closed / "ws")
    assert ok, message
    assert summary == f"ran in {closed / 'ws'}; secret visible: False"


async def test_an_agent_file_in_a_0700_dir_with_the_workspace_elsewhere_runs(
    tmp_path: Path,
) -> None:
    closed = _closed(tmp_path / "d")
    ws = tmp_path / "ws"
    ws.mkdir()
    ok, summary, message = await _run_agent(closed / "agent.py", ws)
    assert ok, message
    assert summary == f"ran in {ws}; secret visible: False"


@pytest.fixture
def home() -> Iterator[Path]:
    """A 0700 home directory outside the private temp dirs, as /home/NAME is."""
    where = Path(tempfile.mkdtemp(prefix="tether-test-home-", dir="/home"))
    shutil.rmtree(where)
    try:
        yield _closed(where)
    finally:
        shutil.rmtree(where, ignore_errors=True)


async def test_an_agent_and_a_workspace_in_a_0700_home_run(home: Path) -> None:
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / "project").mkdir()
    ok, summary, message = await _run_agent(home / "agent.py", home / "project")
    assert ok, message
    assert summary == f"ran in {home / 'project'}; secret visible: False"


async def test_a_command_script_in_a_0700_dir_runs(tmp_path: Path) -> None:
    closed = _closed(tmp_path / "d")
    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = config(isolation="sandbox", read_paths=[str(CHILDREN)])
    async with Supervisor(cfg) as sup:
        with anyio.fail_after(60):
            result = await sup.run(
                "go", workspace=ws, command=[PY, "-I", str(closed / "child.py"), str(CHILDREN)]
            )
    assert result.success, result
    assert result.summary == "script ran; secret visible: False"


async def test_an_agent_file_the_sandbox_may_not_read_is_refused_before_spawning(
    tmp_path: Path,
) -> None:
    closed = _closed(tmp_path / "d")
    (closed / "agent.py").chmod(0o600)
    ws = tmp_path / "ws"
    ws.mkdir()
    async with Supervisor(config(isolation="sandbox")) as sup:
        with pytest.raises(ValueError) as refused:
            await sup.run("go", agent=f"{closed / 'agent.py'}:make", workspace=ws)
    message = str(refused.value)
    assert f"cannot read the file {closed / 'agent.py'} (mode 600" in message, message
    assert f"chmod o+r {closed / 'agent.py'}" in message and "--isolation process" in message


async def test_a_read_paths_entry_the_sandbox_may_not_enter_is_refused_before_spawning(
    tmp_path: Path,
) -> None:
    closed = _closed(tmp_path / "d")
    ws = tmp_path / "ws"
    ws.mkdir()
    async with Supervisor(config(isolation="sandbox", read_paths=[str(closed)])) as sup:
        with pytest.raises(ValueError) as refused:
            await sup.run("go", workspace=ws, command=[PY, "-I", "-c", "pass"])
    message = str(refused.value)
    assert f"cannot read the directory {closed} (mode 700" in message, message
    assert f"chmod o+rx {closed}" in message


def test_the_cli_names_the_unreadable_agent_file_and_spawns_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.parent.cli.main import main

    closed = _closed(tmp_path / "d")
    (closed / "agent.py").chmod(0o600)
    argv = ["run", "go", "--agent", f"{closed / 'agent.py'}:make", "--workspace", str(tmp_path)]
    assert main([*argv, "--isolation", "sandbox", "--quiet"]) == 2  # bad usage
    err = capsys.readouterr().err
    assert f"cannot read the file {closed / 'agent.py'}" in err and "chmod o+r" in err, err
