"""A run's plan launches the zygote its child will be forked by before it chooses the run's
isolation (the first plan of a process probes the host's sandbox with a trial child), so the
zygote's start overlaps the rest of the plan: what is launched ahead is the zygote the run then
uses, a zygote launched for a plan that is refused serves the next run or goes with the
supervisor, nothing is launched for a run the zygote would not serve, and a zygote launched
ahead that never gets ready leaves the run to exec, saying why."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import psutil
import pytest
from act_reports import cmdline

from tether.parent.egress.policy import NetworkPolicy, parse_destination
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import zygote_command
from tether.parent.process.host import pid_alive
from tether.parent.process.isolation import Choice
from tether.parent.process.limits import DisposePolicy
from tether.parent.providers.builtin import builtin_providers
from tether.parent.run.events import RunStarted
from tether.parent.run.plan import PlanContext, plan
from tether.parent.run.spec import RunSpec
from tether.parent.run.transport.local import LocalProcess
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

FAST = DisposePolicy(shutdown=0.3, eof=0.3, term=0.3, kill=1.0)
DEADLINE = 15.0
COMPLETE = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
  "arguments": {"summary": "done", "paths": []}}]}]}"""
ANSWER = Path(__file__).parent.parent / "children" / "answer_and_exit.py"


def _model() -> ScriptedModel:
    return ScriptedModel.from_json(COMPLETE)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children()}


def _zygotes() -> list[int]:
    """This process's children that are (or, under their trampoline, are about to be) a
    zygote."""
    return [
        proc.pid
        for proc in psutil.Process().children()
        if "tether.child.zygote" in " ".join(cmdline(proc.pid))
    ]


async def test_a_first_run_forks_its_child_from_a_zygote_launched_before_its_isolation_was_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[set[int]] = []
    choose = LocalProcess.isolation

    def isolation(self: LocalProcess, config: ChildConfig, remote: str | None) -> Choice:
        seen.append(_children())  # what runs while the plan chooses (and maybe probes)
        return choose(self, config, remote)

    monkeypatch.setattr(LocalProcess, "isolation", isolation)
    started: list[RunStarted] = []
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        sup.subscribe(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
        with anyio.fail_after(DEADLINE):
            result = await sup.run("x", workspace=tmp_path, model=_model())
        zygote = sup.zygote_pid
    assert result.success, result
    assert zygote is not None and len(seen) == 1
    assert zygote in seen[0], "the zygote the run used was started after the plan chose"
    assert [(s.spawner, s.fallback) for s in started] == [("zygote", None)]
    assert not pid_alive(zygote)


async def test_a_zygote_launched_for_a_plan_that_is_then_refused_serves_the_next_run(
    tmp_path: Path,
) -> None:
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        before = _children()
        # The model script is read after the isolation is chosen: the plan is refused then.
        with pytest.raises(ValueError, match="model"):
            await sup.start("x", workspace=tmp_path, model=f"scripted:{tmp_path / 'none.json'}")
        launched = _zygotes()
        assert len(launched) == 1 and launched[0] not in before
        with anyio.fail_after(DEADLINE):
            result = await sup.run("x", workspace=tmp_path, model=_model())
        assert result.success, result
        assert sup.zygote_pid == launched[0]
        assert _zygotes() == launched, "a second zygote was started"


async def test_a_zygote_launched_for_a_refused_plan_goes_with_the_supervisor(
    tmp_path: Path,
) -> None:
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        with pytest.raises(ValueError, match="model"):
            await sup.start("x", workspace=tmp_path, model=f"scripted:{tmp_path / 'none.json'}")
        launched = _zygotes()
        assert len(launched) == 1
        assert sup.zygote_pid is None  # launched, never made ready: no run asked for it
    assert not pid_alive(launched[0]), "the zygote launched ahead outlived its supervisor"


@pytest.mark.parametrize(
    "config, command",
    [
        (ChildConfig(dispose=FAST), [sys.executable, "-I", str(ANSWER)]),
        (ChildConfig(dispose=FAST, spawner="exec"), None),
        (ChildConfig(dispose=FAST, transport="memory"), None),
    ],
    ids=["a command child", "the exec spawner", "a child in memory"],
)
async def test_no_zygote_is_launched_ahead_of_a_run_it_would_not_fork(
    tmp_path: Path, config: ChildConfig, command: list[str] | None
) -> None:
    async with Supervisor(config) as sup:
        with anyio.fail_after(DEADLINE):
            result = await sup.run("x", workspace=tmp_path, model=_model(), command=command)
        assert result.success, result
        assert _zygotes() == []
        assert sup.zygote_pid is None


@pytest.mark.parametrize(
    "config, provider, told",
    [
        (ChildConfig(), None, True),
        (ChildConfig(spawner="exec"), None, True),  # the supervisor declines it
        (ChildConfig(network=NetworkPolicy((parse_destination("pkg.test:443"),))), None, False),
        (ChildConfig(transport="memory"), None, False),
        (ChildConfig(), "inprocess", False),
    ],
    ids=["a local process", "exec", "a network policy", "in memory", "inprocess"],
)
async def test_a_plan_tells_the_supervisor_ahead_only_of_a_local_child_without_a_network_policy(
    tmp_path: Path, config: ChildConfig, provider: str | None, told: bool
) -> None:
    asked: list[ChildConfig] = []
    ctx = PlanContext(builtin_providers(), config, ahead=asked.append)
    spec = RunSpec(prompt="x", workspace=str(tmp_path), model=_model(), provider=provider)
    planned = await plan(spec, ctx)
    assert len(asked) == (1 if told else 0)
    if told:
        assert asked[0].command == planned.config.command


async def test_a_zygote_launched_ahead_that_exits_before_it_is_ready_leaves_the_run_to_exec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module the zygote's interpreter cannot import: it exits at once, never ready.
    monkeypatch.setattr(zygote_command, "ZYGOTE_MODULE", "tether.child.no_such_zygote")
    started: list[RunStarted] = []
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        sup.subscribe(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
        with anyio.fail_after(DEADLINE):
            for _ in range(2):
                result = await sup.run("x", workspace=tmp_path, model=_model())
                assert result.success, result
                assert _zygotes() == []  # not launched again for the second run
    assert [s.spawner for s in started] == ["exec", "exec"]
    assert all(
        s.fallback and "zygote could not start" in s.fallback and "exited" in s.fallback
        for s in started
    ), started
