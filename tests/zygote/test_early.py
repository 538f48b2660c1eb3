"""The `tether` command launches the zygote before its own imports when the command is a run
the zygote serves, and a program does when it calls `tether.prelaunch()` first
(`tether.parent.process.early`): the supervisor's first run then forks its child from that
zygote; one launched for another environment is killed and a new one launched;
one never taken goes when the command exits or is killed, its standby with it; and the early
launch imports only the standard library and `tether.contain`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from act_reports import gone_or_zombie

from tether._command import _runs_through_a_zygote
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import early
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import RunStarted
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

FAST = DisposePolicy(shutdown=0.3, eof=0.3, term=0.3, kill=1.0)
DEADLINE = 15.0
COMPLETE = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
  "arguments": {"summary": "done", "paths": []}}]}]}"""


@pytest.fixture(autouse=True)
def nothing_waits() -> Iterator[None]:
    yield
    early.discard()  # a test that failed half-way leaves no early zygote to the next


def _until_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        left = [p for p in pids if not gone_or_zombie(p)]
        if not left:
            return []
        time.sleep(0.02)
    return left


async def test_the_first_run_forks_its_child_from_the_zygote_launched_early(
    tmp_path: Path,
) -> None:
    early.prelaunch()
    [launched] = early._waiting
    started: list[RunStarted] = []
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        sup.subscribe(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
        with anyio.fail_after(DEADLINE):
            result = await sup.run("x", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE))
        zygote = sup.zygote_pid
    assert result.success, result
    assert zygote == launched.popen.pid
    assert early._waiting == []
    assert [(s.spawner, s.fallback) for s in started] == [("zygote", None)]
    assert _until_gone([launched.popen.pid]) == []


async def _a_new_zygote_serves(tmp_path: Path, launched: early.EarlyZygote) -> None:
    """A run forks its child from a zygote of its own, the early one killed (or found dead)
    and reaped."""
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        with anyio.fail_after(DEADLINE):
            result = await sup.run("x", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE))
        zygote = sup.zygote_pid
    assert result.success, result
    assert zygote is not None and zygote != launched.popen.pid
    assert launched.popen.returncode == -signal.SIGKILL, "the early zygote was not reaped"
    assert early._waiting == []


async def test_a_zygote_launched_early_in_another_environment_is_killed_and_a_new_one_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    early.prelaunch()
    [launched] = early._waiting
    monkeypatch.setenv("TZ", "UTC0-changed")  # a variable every child gets: not the same env
    await _a_new_zygote_serves(tmp_path, launched)


def _dead_unreaped(pid: int) -> bool:
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


async def test_an_early_zygote_that_died_before_it_was_taken_is_reaped_and_a_new_one_serves(
    tmp_path: Path,
) -> None:
    early.prelaunch()
    [launched] = early._waiting
    os.killpg(launched.popen.pid, signal.SIGKILL)
    with anyio.fail_after(DEADLINE):
        while not _dead_unreaped(launched.popen.pid):
            await anyio.sleep(0.01)  # dead, and not reaped yet: as the run's launch finds it
    await _a_new_zygote_serves(tmp_path, launched)


def test_a_second_prelaunch_while_one_waits_launches_nothing() -> None:
    early.prelaunch()
    [launched] = early._waiting
    early.prelaunch()  # a program and a library it imports may both call it
    assert early._waiting == [launched]
    early.discard()
    assert launched.popen.returncode == -signal.SIGKILL
    assert _until_gone([launched.popen.pid]) == []


def test_an_early_launch_that_cannot_start_leaves_nothing_waiting_and_no_descriptor_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")  # as an unexecutable interpreter would

    monkeypatch.setattr(early, "start", refused)
    before = set(os.listdir("/proc/self/fd"))
    early.prelaunch()
    assert early._waiting == []
    assert set(os.listdir("/proc/self/fd")) == before


_COMMAND = """
import json, os, sys, time
from tether.parent.process import early
from tether.parent.process.zygote import standby_pids
early.prelaunch()
[z] = early._waiting
pid = z.popen.pid
deadline = time.monotonic() + 10
while not standby_pids(pid) and time.monotonic() < deadline:
    time.sleep(0.01)  # the zygote is ready, idle, and has forked its standby
print(json.dumps([pid, *standby_pids(pid)]), flush=True)
if sys.argv[1] == "wait":
    time.sleep(60)
"""


@pytest.mark.parametrize("end", ["exits", "is SIGKILLed"])
def test_a_zygote_launched_early_and_never_taken_goes_with_the_command(end: str) -> None:
    command = subprocess.Popen(
        [sys.executable, "-I", "-c", _COMMAND, "exit" if end == "exits" else "wait"],
        stdout=subprocess.PIPE,
    )
    try:
        assert command.stdout is not None
        pids = json.loads(command.stdout.readline())
        assert len(pids) == 2, f"no standby was forked: {pids}"
        if end == "is SIGKILLed":
            command.send_signal(signal.SIGKILL)
        command.wait(timeout=DEADLINE)
        assert _until_gone(pids) == []
    finally:
        command.kill()
        command.wait(timeout=DEADLINE)
        if command.stdout is not None:
            command.stdout.close()


_PROGRAM = """
import tether
tether.prelaunch()  # a program's first line, before its imports
import json, sys
import anyio
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import early

[launched] = early._waiting

async def main():
    async with tether.Supervisor() as sup:
        model = ScriptedModel.from_json(sys.argv[2])
        result = await sup.run("x", workspace=sys.argv[1], model=model)
        print(json.dumps([result.success, sup.zygote_pid, launched.popen.pid]), flush=True)

anyio.run(main)
"""


def test_a_program_that_calls_tether_prelaunch_first_forks_its_first_run_from_that_zygote(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    got = subprocess.run(
        [sys.executable, "-I", "-c", _PROGRAM, str(tmp_path), COMPLETE],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert got.returncode == 0, got.stderr
    success, used, launched = json.loads(got.stdout)
    assert success is True
    assert used == launched
    assert _until_gone([launched]) == []


def test_the_early_launch_imports_only_the_standard_library_and_tethers_own_light_modules(
    modules_loaded_by: Callable[[str], list[str]],
) -> None:
    # Through the public name, as a program calls it: `tether` loads the rest on first use.
    # The zygote it launched goes when the program exits.
    loaded = modules_loaded_by("import tether\ntether.prelaunch()")
    libraries = [
        m for m in loaded if m.split(".")[0] in ("anyio", "msgspec", "psutil", "jsonrpcserver")
    ]
    assert libraries == []
    ours = {m for m in loaded if m.startswith("tether.")}
    assert ours <= {
        "tether.contain",
        "tether.contain.argv",
        "tether.contain.inplace",
        "tether.parent",
        "tether.parent.process",
        "tether.parent.process.early",
        "tether.parent.process.env",
        "tether.parent.process.markers",
        "tether.parent.process.pipes",
        "tether.parent.process.start",
        "tether.parent.process.zygote_command",
    }, ours


@pytest.mark.parametrize(
    ("args", "early_launch"),
    [
        (["run", "--model", "scripted:t.json", "go"], True),
        (["run", "--isolation", "process", "--quiet", "go"], True),
        (["run", "--help"], False),
        (["run", "--launcher=bwrap", "go"], False),
        (["run", "--command", "python3 agent.py", "go"], False),
        (["run", "--allow-net", "example.com", "go"], False),
        (["orchestrate", "--model", "scripted:t.json", "plan it"], True),
        (["mcp", "--workspace", "."], True),
        (["mcp", "--list-tools"], False),
        (["doctor"], False),
        (["agents", "ls"], False),
        ([], False),
    ],
)
def test_the_command_launches_a_zygote_early_only_for_a_run_it_would_serve(
    args: list[str], early_launch: bool
) -> None:
    assert _runs_through_a_zygote(args) is early_launch


_TRACED_COMMAND = """
import sys
from tether.parent.process import early
take = early.take_early

def take_early(env, standby_after):
    got = take(env, standby_after)
    print("taken" if got is not None else "not taken", file=sys.stderr, flush=True)
    return got

early.take_early = take_early
import threading
from tether.parent.process import isolation
trial = isolation._probe

def _probe(forced):
    print("trial in", threading.current_thread().name, file=sys.stderr, flush=True)
    return trial(forced)

isolation._probe = _probe
from tether._command import main
main()
"""


def test_tether_run_takes_its_early_zygote_and_tries_the_sandbox_beside_its_set_up(
    tmp_path: Path,
) -> None:
    turns = tmp_path / "turns.json"
    turns.write_text(COMPLETE)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    argv = ["run", "--model", f"scripted:{turns}", "--workspace", str(workspace), "--json", "go"]
    got = subprocess.run(
        [sys.executable, "-I", "-c", _TRACED_COMMAND, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["success"] is True
    assert got.stderr.splitlines().count("taken") == 1, got.stderr
    assert "not taken" not in got.stderr
    # The host's sandbox was tried once, beside the command's set-up, not by the run's plan.
    assert [ln for ln in got.stderr.splitlines() if ln.startswith("trial")] == [
        "trial in tether-host-probe"
    ]
