"""The packaging tests build and install tether from a copy of the checkout: setuptools builds
in the source tree's own `build/`, which two builds at once (another test's, the user's own)
would empty under each other."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = {".venv", "build", ".git", ".nox", "__pycache__"}


def _copy_source(dest: Path) -> Path:
    shutil.copytree(ROOT, dest, ignore=lambda _, names: [n for n in names if n in LEFT_OUT])
    return dest


@pytest.fixture(scope="session")
def copy_source() -> Callable[[Path], Path]:
    """`copy_source(dest)`: the checkout copied to `dest` (no venv, build, git or caches)."""
    return _copy_source
