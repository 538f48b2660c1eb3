"""scripts/_venv.sh installs what the script sourcing it needs: scripts/demo the runtime
dependencies only, scripts/test (and the other tools) the test and ray extras too; a fuller
install satisfies the demo, a runtime-only one does not satisfy the tests.

Run on a copy of the scripts with a stand-in `.venv/bin/python` that records each pip call
instead of installing (no network, no venv): what is checked is what the script asks pip for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDER = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../../pip-calls"
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "scripts").mkdir(parents=True)
    for name in ("_venv.sh", "demo"):
        shutil.copy2(ROOT / "scripts" / name, root / "scripts" / name)
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    for folder in ("api", "parent", "child", "protocol", "wire", "contain"):
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text("")
    (root / "examples").mkdir()
    (root / "examples" / "demo.py").write_text("")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(RECORDER)
    (bin_dir / "python").chmod(0o755)
    return root


def _calls(root: Path) -> list[str]:
    path = root / "pip-calls"
    return (
        [line for line in path.read_text().splitlines() if "pip install" in line]
        if path.exists()
        else []
    )


def _source(root: Path, extras: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_EXTRAS"}
    if extras is not None:
        env["TETHER_EXTRAS"] = extras
    subprocess.run(
        ["bash", "-c", "source scripts/_venv.sh"], cwd=root, env=env, check=True, timeout=30
    )


def test_the_demo_installs_only_the_runtime_dependencies(tmp_path: Path) -> None:
    root = _project(tmp_path)
    subprocess.run(["bash", "scripts/demo"], cwd=root, check=True, timeout=30)
    calls = _calls(root)
    assert len(calls) == 1, calls
    assert " -e . " in f"{calls[0]} ", calls  # no [test], no [ray]
    assert "editable_mode=strict" in calls[0]


def test_the_tests_install_the_test_and_ray_extras(tmp_path: Path) -> None:
    root = _project(tmp_path)
    _source(root, None)
    assert [c for c in _calls(root) if "-e .[ray,test]" in c], _calls(root)


def test_a_demo_after_the_tests_reinstalls_nothing_and_the_tests_after_a_demo_add_their_extras(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    _source(root, None)
    subprocess.run(["bash", "scripts/demo"], cwd=root, check=True, timeout=30)
    assert len(_calls(root)) == 1, _calls(root)
    other = _project(tmp_path / "other")
    subprocess.run(["bash", "scripts/demo"], cwd=other, check=True, timeout=30)
    _source(other, None)
    calls = _calls(other)
    assert len(calls) == 2 and "-e .[ray,test]" in calls[1], calls
    _source(other, None)
    assert len(_calls(other)) == 2, "an install with every extra needed was redone"


def test_a_changed_module_list_reinstalls_with_the_extras_already_there(tmp_path: Path) -> None:
    root = _project(tmp_path)
    _source(root, None)
    (root / "contain" / "new_module.py").write_text("")
    subprocess.run(["bash", "scripts/demo"], cwd=root, check=True, timeout=30)
    calls = _calls(root)
    assert len(calls) == 2 and "-e .[ray,test]" in calls[1], calls
