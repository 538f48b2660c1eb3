"""The project builds as a wheel holding the four packages, their data and the console script,
and the trampoline runs from an installed wheel without site-packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

# One worker builds the project's wheels at a time (see test_install_modes.py), each test
# within 300 s: a build takes 12 s alone, and more than the suite's 60 s in a loaded run.
pytestmark = [pytest.mark.xdist_group("wheel_builds"), pytest.mark.timeout(300)]


def _build_wheel(tmp_path: Path, copy_source: Callable[[Path], Path]) -> Path:
    src = copy_source(tmp_path / "src")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr  # what pip said, not only its status
    (wheel,) = tmp_path.glob("tether-*.whl")
    return wheel


def test_the_wheel_holds_parent_child_protocol_their_data_and_the_tether_script(
    tmp_path: Path, copy_source: Callable[[Path], Path]
) -> None:
    wheel = _build_wheel(tmp_path, copy_source)
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "tether/protocol/__init__.py",
        "tether/protocol/schema.json",
        "tether/protocol/py.typed",
        "tether/child/__main__.py",
        "tether/child/py.typed",
        "tether/parent/supervisor.py",
        "tether/contain/trampoline.py",
        "tether/contain/sequence.py",
        "tether/contain/py.typed",
        "tether/parent/process/_keeper.py",
        "tether/parent/process/_pidns.py",
        "tether/parent/placement/nodehost.py",
        "tether/parent/models/scripted.py",
        "tether/parent/run/transport/memory.py",
        "tether/parent/trace/schema.json",
        "tether/parent/py.typed",
    ):
        assert required in names, required
    assert not any(
        n.startswith(("parent/", "child/", "protocol/", "contain/", "tests/")) for n in names
    )
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "tether = tether._command:main" in text


def test_the_trampoline_of_an_installed_wheel_finds_its_siblings_without_site_packages(
    tmp_path: Path, copy_source: Callable[[Path], Path]
) -> None:
    wheel = _build_wheel(tmp_path / "dist", copy_source)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), wheel],
        check=True,
        capture_output=True,
        timeout=120,
    )
    trampoline = target / "tether" / "contain" / "trampoline.py"
    command = [sys.executable, "-c", "print(42)"]
    got = subprocess.run(
        [sys.executable, "-I", "-S", str(trampoline), "{}", "--", *command],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == "42\n"
