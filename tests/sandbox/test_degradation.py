"""A host that cannot sandbox says so loudly and never downgrades silently. Forced here with
`TETHER_LANDLOCK_ABI` (0: no Landlock; 1: an ABI too old), which the host probe reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from sandbox_targets import CHILDREN, PY, config

from tether.parent.process.isolation import FORCE_ABI_ENV, choose_level, probe_host
from tether.parent.supervisor import Supervisor

pytestmark = pytest.mark.anyio
ANSWER = CHILDREN / "answer_and_exit.py"


@pytest.fixture(params=["0", "1"], ids=["no-landlock", "abi-too-old"])
def weak_host(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(FORCE_ABI_ENV, request.param)
    if request.param == "1" and probe_host().landlock_abi == 0:
        pytest.skip("no Landlock here at all")
    return str(request.param)


def test_the_probe_names_why_a_weak_host_cannot_sandbox(weak_host: str) -> None:
    got = probe_host()
    assert got.why_not is not None and got.best == "process"
    assert ("not available" if weak_host == "0" else "older") in got.why_not
    assert got.forced and FORCE_ABI_ENV in got.why_not


def test_auto_settles_for_process_with_a_warning_and_sandbox_is_refused(weak_host: str) -> None:
    auto = choose_level("auto")
    assert auto.level == "process" and auto.warning and "process isolation only" in auto.warning
    with pytest.raises(ValueError, match="not available on this host") as refused:
        choose_level("sandbox")
    assert "tether doctor" in str(refused.value) and "--isolation process" in str(refused.value)
    assert choose_level("process").warning is None


async def test_a_run_on_a_weak_host_reports_process_with_the_warning_and_one_stderr_line(
    weak_host: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async with Supervisor(config()) as sup:
        results = []
        for _ in range(2):
            with anyio.fail_after(30):
                results.append(
                    await sup.run("x", workspace=tmp_path, command=[PY, "-I", str(ANSWER)])
                )
    for result in results:
        assert result.isolation is not None
        assert result.isolation.level == "process" and result.isolation.landlock_abi is None
        assert result.isolation.warning and "cannot sandbox" in result.isolation.warning
    err = capfd.readouterr().err
    assert err.count("tether: warning: this host cannot sandbox children") == 1, err


async def test_asking_for_the_sandbox_on_a_weak_host_is_bad_usage_before_any_spawn(
    weak_host: str, tmp_path: Path
) -> None:
    async with Supervisor(config(isolation="sandbox")) as sup:
        with pytest.raises(ValueError, match="isolation 'sandbox' is not available"):
            await sup.start("x", workspace=tmp_path, command=[PY, "-I", str(ANSWER)])
        assert not sup._live


def _cli(*args: str, env_abi: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.parent.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, FORCE_ABI_ENV: env_abi},
    )


def test_the_cli_refuses_isolation_sandbox_on_a_weak_host_with_exit_2(tmp_path: Path) -> None:
    got = _cli("run", "x", "--workspace", str(tmp_path), "--isolation", "sandbox", env_abi="0")
    assert got.returncode == 2
    assert got.stdout == ""
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "isolation 'sandbox' is not available" in lines[0], got.stderr


def test_doctor_says_loudly_that_a_weak_host_runs_process_only() -> None:
    text = _cli("doctor", env_abi="0")
    assert "auto picks PROCESS ONLY: WARNING" in text.stdout
    report = json.loads(_cli("doctor", "--json", env_abi="0").stdout)
    assert report["isolation"]["sandbox"] is False and report["isolation"]["auto"] == "process"
    assert "warning" in report["isolation"] and "why" in report["isolation"]


def test_doctor_reports_the_sandbox_and_its_abi_on_a_capable_host() -> None:
    if probe_host().why_not:
        pytest.skip(f"no sandbox here: {probe_host().why_not}")
    report = json.loads(_cli("doctor", "--json", env_abi="").stdout)
    assert report["isolation"]["sandbox"] is True and report["isolation"]["auto"] == "sandbox"
    assert (
        report["isolation"]["landlockAbi"] == report["landlock"]["abi"]
        or report["isolation"]["landlockAbi"] <= report["landlock"]["abi"]
    )


def test_an_unknown_level_and_a_sandbox_for_a_remote_launcher_are_bad_usage() -> None:
    with pytest.raises(ValueError, match="expected one of auto, sandbox, process"):
        choose_level("strict")
    with pytest.raises(ValueError, match="cannot reach a child started by the 'ssh' launcher"):
        choose_level("sandbox", remote_launcher="ssh")
    remote = choose_level("auto", remote_launcher="docker")
    assert remote.level == "process" and remote.warning and "docker" in remote.warning


def test_a_host_whose_sandbox_cannot_guard_git_still_sandboxes_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A supervisor without root where user namespaces are forbidden (an AppArmor or sysctl
    policy) cannot mount over `.git`: the sandbox goes on without the guard, its plans carry
    none, and `tether doctor` says writes there are only listed and verified."""
    from tether.parent.cli import doctor
    from tether.parent.process import isolation, layers

    def trial(
        abi: int, root: bool, *, local_sockets: bool, git: bool, layer: bool = False
    ) -> isolation._Trial:
        # No user namespace: neither the git guard nor a layer's overlay can be made in one.
        return isolation._Trial("unshare: Operation not permitted" if git or layer else None)

    monkeypatch.setattr(isolation._probes, "answers", {})
    monkeypatch.setattr(isolation, "_trial", trial)
    # What this host gives a layered run is probed again, and forgotten after the test.
    monkeypatch.setattr(layers._supported, "answers", {})
    got = probe_host()
    assert got.why_not is None and got.best == "sandbox"
    assert got.git_unguarded == "unshare: Operation not permitted"
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    setup = isolation.plan_for("sandbox", command=["/bin/true"], workspace=str(tmp_path))
    if setup.cleanup is not None:
        setup.cleanup()
    assert setup.plan.git_guard == []
    text = doctor.render(doctor.report())
    assert ".git/config and .git/hooks: NOT refused here" in text
    assert "why: unshare: Operation not permitted" in text
    # Layered runs get a copy instead of an overlay, and doctor says why.
    assert layers.support().overlay is None
    assert "  no overlay: unshare: Operation not permitted" in text
