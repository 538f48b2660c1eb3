"""The in-memory transport: tether's child runtime as a task of the run, driven by the run handle
exactly as a child process is (handshake, clocks, cancel, follow-ups), with no process at all —
and what it refuses to pretend (a command, a launcher, the zygote, a sandbox, a pool)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tether.parent import Continuation, Supervisor
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.config import ChildConfig, PoolSpec
from tether.parent.run.events import ChildEvent, Event, RunStarted

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
TESTS = Path(__file__).resolve().parent.parent
COMPLETE = json.dumps(
    [{"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "done"}}]}]
)


def three_answers() -> ScriptedModel:
    """Completes each of three activations with its own word."""
    return ScriptedModel.from_json(
        json.dumps(
            [
                {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": word}}]}
                for word in ("first", "second", "third")
            ]
        )
    )


@pytest.mark.in_memory
async def test_a_run_in_memory_is_driven_like_a_child_and_says_it_had_no_process(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    async with Supervisor(IN_MEMORY) as sup:
        handle = await sup.start(
            "x", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE), on_event=events.append
        )
        with anyio.fail_after(20):
            result = await handle.result()
        assert handle.spawner == "memory" and handle.pid is None
    assert result.success and result.summary == "done", result
    assert result.pid is None and result.containment == "none"
    assert result.isolation is not None and result.isolation.level == "none"
    assert result.isolation.warning and "in-memory transport" in result.isolation.warning
    [started] = [e for e in events if isinstance(e, RunStarted)]
    assert started.pid == os.getpid() and started.spawner == "memory"
    assert any(isinstance(e, ChildEvent) and e.kind == "tool_call" for e in events)


@pytest.mark.in_memory
@pytest.mark.parametrize("how", ["config", "provider"])
async def test_a_continuable_run_in_memory_takes_follow_ups_in_the_same_runtime(
    tmp_path: Path, how: str
) -> None:
    config = IN_MEMORY if how == "config" else ChildConfig()
    provider = "inprocess" if how == "provider" else None
    async with Supervisor(config) as sup:
        with anyio.fail_after(20):
            handle = await sup.start(
                "first",
                workspace=tmp_path,
                model=three_answers(),
                provider=provider,
                continuation=Continuation(30),
            )
            assert (await handle.result()).summary == "first"
            second = await handle.message("second")
            third = await handle.message("third")
            handle.close()
            await handle.wait()
            assert await handle.message("too late") is None
    assert second is not None and second.summary == "second" and second.success
    assert third is not None and third.summary == "third"
    assert second.turn_count == 1 and second.iteration_count == 1  # the activation's own


@pytest.mark.in_memory
@pytest.mark.parametrize("how", ["config", "provider"])
async def test_a_run_in_memory_never_asks_the_host_whether_it_can_sandbox(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe starts a throwaway sandboxed child: nothing a run in memory needs.
    from tether.parent.run import core

    asked: list[str] = []
    real = core.probe_host

    def probe(*args: object, **kwargs: object) -> object:
        asked.append("probe")
        return real()

    monkeypatch.setattr(core, "probe_host", probe)
    config = IN_MEMORY if how == "config" else ChildConfig()
    provider = "inprocess" if how == "provider" else None
    async with Supervisor(config) as sup:
        with anyio.fail_after(20):
            result = await sup.run(
                "x", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE), provider=provider
            )
    assert result.success, result
    assert asked == []


@pytest.mark.in_memory
async def test_an_agent_that_cannot_be_loaded_in_memory_is_spawn_failed(tmp_path: Path) -> None:
    async with Supervisor(IN_MEMORY) as sup:
        with anyio.fail_after(20):
            result = await sup.run("x", workspace=tmp_path, agent="no_such_module_here:agent")
    assert result.failure is not None and result.failure.kind == "spawn_failed"
    assert "no_such_module_here" in result.message


@pytest.mark.in_memory
@pytest.mark.parametrize(
    ("config", "says"),
    [
        (ChildConfig(transport="memory", isolation="process"), "cannot give isolation='process'"),
        (ChildConfig(transport="memory", launcher="bwrap"), "takes no launcher"),
        (ChildConfig(transport="memory", spawner="zygote"), "spawner='zygote'"),
        (ChildConfig(transport="pigeon"), "transport 'pigeon'"),
    ],
)
async def test_what_the_in_memory_transport_cannot_give_is_bad_usage(
    tmp_path: Path, config: ChildConfig, says: str
) -> None:
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match=says.replace("(", r"\(")):
            await sup.start("x", workspace=tmp_path, config=config)


@pytest.mark.in_memory
async def test_a_command_cannot_run_in_memory_unless_the_command_provider_runs_it(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-I", str(TESTS / "children" / "answer_and_exit.py")]
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match="runs tether's own child runtime"):
            await sup.start(
                "x", workspace=tmp_path, config=IN_MEMORY, provider="spawn", command=command
            )


async def test_a_command_child_of_a_supervisor_configured_for_memory_is_a_process(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-I", str(TESTS / "children" / "answer_and_exit.py")]
    async with Supervisor(IN_MEMORY) as sup:
        with anyio.fail_after(20):
            handle = await sup.start("x", workspace=tmp_path, command=command)
            result = await handle.result()
        assert handle.spawner == "exec" and handle.pid is not None
        assert sup._keeper is not None  # started with this first child process
    assert result.success and result.summary == "done and gone", result


def test_a_pool_of_children_in_memory_is_refused() -> None:
    with pytest.raises(ValueError, match="a pool holds local child processes only"):
        Supervisor(IN_MEMORY, pool=PoolSpec(1))


def test_a_test_of_the_in_memory_tier_that_starts_a_process_fails(tmp_path: Path) -> None:
    # The tier's check is the suite's own conftest, loaded into a scratch test session.
    (tmp_path / "conftest.py").write_text(
        f"exec(compile(open({str(TESTS / 'conftest.py')!r}).read(), 'conftest', 'exec'))\n"
    )
    (tmp_path / "test_tier.py").write_text(
        "import subprocess, pytest\n\n"
        "@pytest.mark.in_memory\n"
        "def test_spawns():\n    subprocess.run(['true'], check=True)\n\n"
        "@pytest.mark.in_memory\n"
        "def test_does_not():\n    pass\n"
    )
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-o",
            "markers=in_memory: x",
            "-o",
            "addopts=",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert got.returncode == 1, got.stdout + got.stderr
    assert "2 passed, 1 error" in got.stdout, got.stdout  # the error: test_spawns, at teardown
    assert "ERROR test_tier.py::test_spawns" in got.stdout
    assert "a test marked in_memory started 1 process(es)" in got.stdout
