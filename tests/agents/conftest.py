"""Fixtures for the continuable-agent tests: a private state directory and a workspace, and the
shared `agent_models` module importable (pytest runs with `--import-mode=importlib`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("TODO: ship it\n")
    return ws


@pytest.fixture
def hosts(tmp_path: Path, state: Path, workspace: Path) -> Iterator[object]:
    """`hosts.start()`: a parent process on `state` (see agent_hosts.py), killed at the end."""
    from agent_hosts import Hosts

    started = Hosts(tmp_path, state, workspace)
    yield started
    started.close()
