"""`tether doctor` calls a launcher ready only when it can run a child: docker and kubectl
need a daemon or a cluster that answers, asked for a second at most; a failure names the line
that explains it, and so does a run's failure under such a launcher. And doctor tells a
broken installation from a host that cannot sandbox.

The docker and kubectl here are stand-ins on PATH, each a shell script whose behaviour the
test chooses (answer, refuse with what the real client prints, or hang).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio
import pytest

from tether.parent.cli import doctor
from tether.parent.process import isolation
from tether.parent.process.launchers import READINESS_SECONDS, Docker, Kubectl, readiness
from tether.parent.supervisor import ChildConfig, Supervisor

DOCKER_DOWN = """#!/bin/sh
echo "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock." \\
  "Is the docker daemon running?" >&2
echo "Run 'docker $1 --help' for more information" >&2
exit 125
"""
KUBECTL_DOWN = """#!/bin/sh
echo "Client Version: v1.31.0"
echo "The connection to the server localhost:8080 was refused -" \\
  "did you specify the right host or port?" >&2
exit 1
"""
ANSWERS = "#!/bin/sh\necho 27.0.1\n"
HANGS = "#!/bin/sh\nsleep 30 &\nsleep 30\n"


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "bin"
    where.mkdir()
    monkeypatch.setenv("PATH", f"{where}:/usr/bin:/bin")
    return where


def _put(where: Path, name: str, script: str) -> None:
    (where / name).write_text(script)
    (where / name).chmod(0o755)


def test_docker_without_a_daemon_is_not_ready_and_says_why(bin_dir: Path) -> None:
    _put(bin_dir, "docker", DOCKER_DOWN)
    why = readiness(Docker(image="x"))
    assert why is not None and "Cannot connect to the Docker daemon" in why, why
    assert "--help" not in why


def test_kubectl_without_a_cluster_is_not_ready_and_says_why(bin_dir: Path) -> None:
    _put(bin_dir, "kubectl", KUBECTL_DOWN)
    why = readiness(Kubectl(image="x"))
    assert why is not None and "connection to the server localhost:8080 was refused" in why


def test_a_daemon_that_answers_is_ready(bin_dir: Path) -> None:
    _put(bin_dir, "docker", ANSWERS)
    _put(bin_dir, "kubectl", ANSWERS)
    assert readiness(Docker(image="x")) is None
    assert readiness(Kubectl(image="x")) is None


def test_a_client_that_hangs_is_given_a_second_and_leaves_nothing(bin_dir: Path) -> None:
    _put(bin_dir, "docker", HANGS)
    started = time.monotonic()
    why = readiness(Docker(image="x"))
    took = time.monotonic() - started
    assert why is not None and f"did not answer within {READINESS_SECONDS:g}s" in why
    assert took < 10, took  # bounded: not the client's 30 s (the autouse reaper checks leaks)


def test_doctor_reports_each_launchers_readiness(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _put(bin_dir, "docker", DOCKER_DOWN)
    monkeypatch.setenv("PATH", str(bin_dir))  # no kubectl at all
    report = doctor.report()
    launchers = report["launchers"]
    assert launchers["docker:IMAGE"]["installed"] and not launchers["docker:IMAGE"]["ready"]
    assert "Cannot connect to the Docker daemon" in launchers["docker:IMAGE"]["why"]
    assert not launchers["kubectl:IMAGE"]["ready"]
    assert launchers["kubectl:IMAGE"]["why"] == "kubectl not installed"
    assert launchers["local"]["ready"]
    text = doctor.render(report)
    assert "docker:IMAGE" in text and "not ready: `docker version" in text
    assert "Cannot connect to the Docker daemon" in text


@pytest.mark.anyio
async def test_a_run_under_a_failing_launcher_names_the_line_that_explains_it(
    bin_dir: Path, tmp_path: Path
) -> None:
    _put(bin_dir, "docker", DOCKER_DOWN)
    cfg = ChildConfig(launcher="docker:img", isolation="process", handshake_timeout=20.0)
    async with Supervisor(cfg) as sup:
        with anyio.fail_after(60):
            result = await sup.run("x", workspace=tmp_path, command=["true"])
    assert not result.success
    assert "Cannot connect to the Docker daemon" in result.message, result.message
    assert "--help" not in result.message


def test_doctor_names_a_broken_installation_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trampoline that cannot import its siblings (here: a copy alone in a directory) is an
    installation problem, not a host that cannot sandbox."""
    lone = tmp_path / "trampoline.py"
    shutil.copy2(isolation.TRAMPOLINE, lone)
    monkeypatch.setattr(isolation, "TRAMPOLINE", str(lone))
    monkeypatch.setattr(isolation._probes, "answers", {})
    host = isolation.probe_host()
    assert host.install_problem is not None and "installation is broken" in host.install_problem
    assert "ImportError" in host.install_problem or "ModuleNotFoundError" in host.install_problem
    assert host.why_not is None  # the host was not blamed
    report = doctor.report()
    text = doctor.render(report)
    assert "install: BROKEN:" in text and "this host cannot sandbox" not in text, text
    assert "isolation: not tried" in text
    with pytest.raises(ValueError, match="installation is broken"):
        isolation.choose_level("auto", host)
