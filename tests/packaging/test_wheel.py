"""The project builds as a wheel holding the three packages, their data and the console script."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_parent_child_protocol_their_data_and_the_tether_script(
    tmp_path: Path,
) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = tmp_path.glob("tether-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "tether/protocol/__init__.py",
        "tether/protocol/schema.json",
        "tether/protocol/py.typed",
        "tether/child/__main__.py",
        "tether/child/py.typed",
        "tether/parent/supervisor.py",
        "tether/parent/_trampoline.py",
        "tether/parent/_keeper.py",
        "tether/parent/models/scripted.py",
        "tether/parent/py.typed",
    ):
        assert required in names, required
    assert not any(n.startswith(("parent/", "child/", "protocol/", "tests/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "tether = tether.parent.cli:main" in text
