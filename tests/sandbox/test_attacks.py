"""A hostile child at the sandbox level, as a protocol-speaking `command=` child and as a
hostile model driving the built-in agent's `bash` (both spawners): every attack refused, no
listener hears anything, nothing outside the workspace changes, no forged result accepted.

The attacks are in `attacks.py`; the targets (loopback listeners, outside sockets, a
world-writable file owned by another user in a directory the child may read, canary secrets
in the supervisor's environment) in `conftest.py`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import psutil
import pytest
from sandbox_targets import (
    CHILDREN,
    HOSTILE,
    PY,
    REFUSED,
    Targets,
    config,
    needs_sandbox,
    not_refused,
)

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import zygote_command
from tether.parent.supervisor import Supervisor

pytestmark = [pytest.mark.anyio, needs_sandbox]


def _bash_then_complete(command: str) -> ScriptedModel:
    turns = {
        "turns": [
            {"text": "", "toolCalls": [{"name": "bash", "arguments": {"command": command}}]},
            {
                "text": "done",
                "toolCalls": [{"name": "complete", "arguments": {"summary": "done", "paths": []}}],
            },
        ]
    }
    return ScriptedModel.from_json(json.dumps(turns))


# `pidns`: the sandbox is applied inside the launcher's PID namespace, by a second trampoline
# (the outer one must not forbid the shim its namespace): it must hold there all the same.
@pytest.mark.parametrize("launcher", ["local", "pidns"])
async def test_a_hostile_protocol_child_is_refused_every_attack(
    targets: Targets, launcher: str
) -> None:
    ws = targets.workspace
    cfg = config(read_paths=[str(targets.outside), str(CHILDREN)], launcher=launcher)
    async with Supervisor(cfg) as sup:
        keeper = sup._keeper_ready()  # started with the first child; the attack needs it now
        assert keeper is not None
        targets.write(supervisor=os.getpid(), keeper=keeper.pid)
        with anyio.fail_after(60):
            result = await sup.run("attack", workspace=ws, command=[PY, "-I", str(HOSTILE)])
        keeper_alive = keeper.proc.poll() is None
    report = json.loads((ws / "report.json").read_text())
    assert not_refused(report, REFUSED) == {}
    assert _zombies_of(os.getpid()) == [], "the child left zombies in the supervisor"
    assert targets.heard() == []
    assert targets.victim_untouched()
    assert keeper_alive, "the keeper was disarmed or killed"
    # The parent's own fields win over what the child claims.
    assert result.containment != "none"
    assert result.isolation is not None and result.isolation.level == "sandbox"
    assert result.isolation.landlock_abi and result.isolation.landlock_abi >= 1
    assert result.launcher == launcher


@pytest.mark.parametrize("spawner", ["exec", "zygote", "zygote standby"])
async def test_a_hostile_model_driving_bash_is_refused_every_attack_and_cannot_forge_a_result(
    targets: Targets, spawner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = targets.workspace
    model = _bash_then_complete(f"{PY} attacks.py targets.json > report.json 2>&1")
    cfg = config(read_paths=[str(targets.outside)], spawner=spawner.split()[0])
    if spawner == "zygote":
        monkeypatch.setattr(zygote_command, "STANDBY_AFTER", None)  # forked on request
    async with Supervisor(cfg) as sup:
        keeper = sup._keeper_ready()  # started with the first child; the attack needs it now
        assert keeper is not None
        others: list[int] = []
        if spawner != "exec":
            zygote = await sup._zygote_ready()
            others.append(zygote.pid)
        if spawner == "zygote standby":
            # The run is handed to the standby parked here; it attacks the zygote all the same.
            standby = await zygote.parked()
            assert standby is not None
        targets.write(supervisor=os.getpid(), keeper=keeper.pid, others=others, wire=True)
        with anyio.fail_after(60):
            result = await sup.run("attack", agent="tester", workspace=ws, model=model)
        keeper_alive = keeper.proc.poll() is None
        if spawner != "exec":
            # The child itself is reaped once the supervisor lets it go (its verdict socket
            # closed), a moment after the result: what must not stay is anything else.
            with anyio.move_on_after(5):
                while _zombies_of(zygote.pid):
                    await anyio.sleep(0.01)
            assert _zombies_of(zygote.pid) == [], "the child left zombies in the zygote"
    assert _zombies_of(os.getpid()) == [], "the child left zombies in the supervisor"
    text = (ws / "report.json").read_text()
    report = json.loads(text[text.index("{") :])
    extra = [k for k in report if k.startswith(("signal_", "ptrace_", "environ_", "child_"))]
    assert not_refused(report, [*REFUSED, *extra]) == {}
    assert {"child_wire_reopen", "child_environ", "child_ptrace"} <= set(report)
    assert result.success, result
    assert result.summary == "done", "a forged result was accepted"
    assert targets.heard() == []
    assert targets.victim_untouched()
    assert keeper_alive
    if spawner != "exec":
        assert zygote.forks == (
            {"standby": 1, "fresh": 0}
            if spawner == "zygote standby"
            else {"standby": 0, "fresh": 1}
        )


async def test_bash_output_marks_sandbox_denials_as_such(targets: Targets) -> None:
    events: list[object] = []
    model = _bash_then_complete("cat /etc/shadow; touch /etc/tether-sandbox-x; echo x > ../x")
    async with Supervisor(config()) as sup:
        result = await sup.run(
            "x", agent="tester", workspace=targets.workspace, model=model, on_event=events.append
        )
    assert result.success, result
    outputs = [
        e.data["content"]  # type: ignore[attr-defined]
        for e in events
        if getattr(e, "kind", "") == "tool_result" and e.data.get("name") == "bash"  # type: ignore[attr-defined]
    ]
    assert outputs and "denied by the sandbox" in outputs[0], outputs
    assert "Permission denied" in outputs[0] and "Read-only file system" in outputs[0], outputs
    assert not Path("/etc/tether-sandbox-x").exists()
    assert not (targets.workspace.parent / "x").exists()


async def test_the_parents_fields_win_over_what_a_process_level_child_claims(
    targets: Targets,
) -> None:
    async with Supervisor(config(isolation="process", read_paths=[str(CHILDREN)])) as sup:
        keeper = sup._keeper_ready()  # started with the first child; the attack needs it now
        assert keeper is not None
        targets.write(supervisor=os.getpid(), keeper=keeper.pid, claim_only=True)
        with anyio.fail_after(60):
            result = await sup.run(
                "x", workspace=targets.workspace, command=[PY, "-I", str(HOSTILE)]
            )
    assert result.summary == "attacked", result  # the child claims sandbox and no tier
    assert result.isolation is not None and result.isolation.level == "process"
    assert result.isolation.landlock_abi is None
    assert result.containment not in (None, "none")


def test_the_attack_list_covers_what_the_issue_names() -> None:
    """A guard against an attack quietly dropping out of `attacks.py`."""
    assert len(REFUSED) == len(set(REFUSED)) >= 35
    assert sys.executable


def _zombies_of(pid: int) -> list[int]:
    """The children of `pid` that have exited and that nobody has reaped."""
    return [p.pid for p in psutil.Process(pid).children() if p.status() == psutil.STATUS_ZOMBIE]
