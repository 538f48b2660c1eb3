"""Every way tether is installed works: a wheel, `pip install -e .` (setuptools' default
editable mode, an import finder that only a `.pth` file installs) and a strict editable
install (a link tree), each in a fresh venv with its dependencies from the package index:
the conformance kit passes with tether's own child, a sandboxed run completes, and `tether
doctor` finds the installation sound.

The trampoline runs `python -I -S`, without site: it must find its sibling modules by where
its own file is, whatever the installation around it looks like (the default editable mode
has no `tether/` directory anywhere). The checkout is copied first: a strict editable
install writes its link tree into the checkout's `build/`, which the suite's own install
imports from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.parent.process.isolation import probe_host

MODES = ("wheel", "editable", "strict editable")
# One worker builds the project's wheels at a time: two `pip wheel` runs of one source tree
# share its build/ directory and spoil each other's wheel. A venv's setup (copy, build,
# install from the index) takes 22-29 s on a loaded 2-core host, and took more than the
# suite's 60 s in a loaded run: each test gets 300.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("wheel_builds"),
    pytest.mark.timeout(300),
]
TURNS = {
    "turns": [
        {
            "text": "",
            "toolCalls": [{"name": "bash", "arguments": {"command": "echo made > made.txt"}}],
        },
        {
            "text": "done",
            "toolCalls": [
                {"name": "complete", "arguments": {"summary": "done", "paths": ["made.txt"]}}
            ],
        },
    ]
}


def _pip(venv: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), *args],
        check=True,
        capture_output=True,
        timeout=900,
    )


@pytest.fixture(scope="module", params=MODES)
def venv(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    copy_source: Callable[[Path], Path],
) -> Path:
    base = tmp_path_factory.mktemp(str(request.param).replace(" ", "-"))
    src = copy_source(base / "src")
    env = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    if request.param == "wheel":
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base), str(src)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        (wheel,) = base.glob("tether-*.whl")
        _pip(env, "install", "-q", str(wheel))
    elif request.param == "editable":
        _pip(env, "install", "-q", "-e", str(src))
    else:
        _pip(env, "install", "-q", "-e", str(src), "--config-settings", "editable_mode=strict")
    return env


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "tether"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith("TETHER_")},
    )


def test_the_install_is_the_venvs_own(venv: Path) -> None:
    got = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-I",
            "-c",
            "import tether.contain; print(tether.contain.__path__[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    where = got.stdout.strip()
    assert where.startswith(str(venv.parent)), where  # the venv's, or its copy of the checkout


def test_the_conformance_kit_passes_with_tethers_own_child(venv: Path, tmp_path: Path) -> None:
    python = str(venv / "bin" / "python")
    got = _run(venv, "conformance", "--", python, "-I", "-m", "tether.child", cwd=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert " 0 failed" in got.stdout, got.stdout


@pytest.mark.skipif(probe_host().why_not is not None, reason="no sandbox on this host")
def test_a_sandboxed_run_completes(venv: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    model = tmp_path / "turns.json"
    model.write_text(json.dumps(TURNS))
    got = _run(
        venv,
        "run",
        "--isolation",
        "sandbox",
        "--model",
        f"scripted:{model}",
        "--agent",
        "tester",
        "--workspace",
        str(ws),
        "--json",
        "--quiet",
        "make a file",
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    result = json.loads(got.stdout)
    assert result["success"] and result["isolation"]["level"] == "sandbox", result
    assert (ws / "made.txt").read_text() == "made\n"


def test_doctor_finds_the_installation_sound(venv: Path, tmp_path: Path) -> None:
    got = _run(venv, "doctor", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert "install: ok" in got.stdout, got.stdout
    assert "No module named" not in got.stdout, got.stdout
