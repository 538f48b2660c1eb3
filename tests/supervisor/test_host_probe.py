"""The host's sandbox is tried once per process, by the first plan that needs to know, in a
worker thread (its trial child takes tens of milliseconds the event loop's other tasks need):
plans at once share one trial, and a plan that cannot use a local sandbox does not try it."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import anyio
import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import isolation, layers
from tether.parent.process.config import ChildConfig
from tether.parent.providers.builtin import builtin_providers
from tether.parent.run.plan import PlanContext, plan
from tether.parent.run.spec import RunSpec

pytestmark = pytest.mark.anyio

COMPLETE = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
  "arguments": {"summary": "done", "paths": []}}]}]}"""


@pytest.fixture
def trials(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The host probe forgotten, and each real trial of it recorded by the thread that ran it."""
    ran: list[str] = []
    probe = isolation._probe

    def recorded(forced: str) -> isolation.HostIsolation:
        ran.append(threading.current_thread().name)
        return probe(forced)

    monkeypatch.setattr(isolation._probes, "answers", {})
    monkeypatch.setattr(isolation, "_probe", recorded)
    return ran


def _spec(workspace: Path) -> RunSpec:
    return RunSpec(prompt="x", workspace=str(workspace), model=ScriptedModel.from_json(COMPLETE))


async def test_the_first_plan_tries_the_hosts_sandbox_in_a_worker_thread(
    tmp_path: Path, trials: list[str]
) -> None:
    await plan(_spec(tmp_path), PlanContext(builtin_providers(), ChildConfig()))
    assert len(trials) == 1
    assert trials[0] != threading.main_thread().name, "the trial ran on the event loop's thread"
    await plan(_spec(tmp_path), PlanContext(builtin_providers(), ChildConfig()))
    assert len(trials) == 1, "the host was tried again"


async def test_plans_made_at_once_share_one_trial(tmp_path: Path, trials: list[str]) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(plan, _spec(tmp_path), PlanContext(builtin_providers(), ChildConfig()))
    assert len(trials) == 1


@pytest.mark.parametrize(
    "config",
    [ChildConfig(isolation="process"), ChildConfig(transport="memory")],
    ids=["process isolation", "a child in memory"],
)
async def test_a_plan_that_needs_no_local_sandbox_does_not_try_one(
    tmp_path: Path, trials: list[str], config: ChildConfig
) -> None:
    await plan(_spec(tmp_path), PlanContext(builtin_providers(), config))
    assert trials == []


async def test_the_first_layered_plan_tries_an_overlay_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if isolation.probe_host().why_not is not None:
        pytest.skip("no sandbox here: a layered run gets a copy, and nothing is tried")
    ran: list[str] = []
    trial = isolation.trial_layer

    def recorded(host: isolation.HostIsolation) -> str | None:
        ran.append(threading.current_thread().name)
        return trial(host)

    monkeypatch.setattr(isolation, "trial_layer", recorded)
    monkeypatch.setattr(layers._supported, "answers", {})  # tried again here, and forgotten after
    ws = tmp_path / "ws"
    ws.mkdir()
    ctx = PlanContext(builtin_providers(), ChildConfig(layers_dir=str(tmp_path / "layers")))
    spec = dataclasses.replace(_spec(ws), workspace_mode="layered")
    await plan(spec, ctx)
    assert len(ran) == 1 and ran[0] != threading.main_thread().name
    await plan(spec, ctx)
    assert len(ran) == 1, "the overlay was tried again"


async def test_a_plan_made_while_the_commands_early_probe_runs_waits_for_that_trial(
    tmp_path: Path, trials: list[str]
) -> None:
    from tether.parent.process import early

    early.probe_host_meanwhile()  # what the `tether` command does once its imports are done
    await plan(_spec(tmp_path), PlanContext(builtin_providers(), ChildConfig()))
    assert trials == ["tether-host-probe"]
    deadline = anyio.current_time() + 10
    while any(t.name == "tether-host-probe" for t in threading.enumerate()):
        assert anyio.current_time() < deadline, "the probe's thread did not end"
        await anyio.sleep(0.01)


def test_a_trial_in_a_thread_that_raises_leaves_the_next_probe_to_try_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = iter([RuntimeError("the trial broke"), None])
    probe = isolation._probe

    def flaky(forced: str) -> isolation.HostIsolation:
        wrong = next(answers)
        if wrong is not None:
            raise wrong
        return probe(forced)

    monkeypatch.setattr(isolation._probes, "answers", {})
    monkeypatch.setattr(isolation, "_probe", flaky)
    isolation.probe_host_in_thread("a-probe-that-breaks")
    got = isolation.probe_host()  # waits for the thread's trial, then tries again itself
    assert got == probe("")
    assert next(answers, "spent") == "spent", "the second trial did not run"
