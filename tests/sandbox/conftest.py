"""The sandbox tests: `--import-mode=importlib` does not put test folders on `sys.path`; this
adds this one so the tests can import the shared `sandbox_targets` module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from sandbox_targets import Targets, make_targets  # noqa: E402


@pytest.fixture
def targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Targets]:
    yield from make_targets(tmp_path, monkeypatch)
