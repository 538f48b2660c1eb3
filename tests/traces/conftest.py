"""Fixtures for the trace tests: a copy of the example workspace, a directory for traces, and
the model server of tests/models and the MCP harness of tests/mcp importable (pytest runs with
`--import-mode=importlib`)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for folder in (Path(__file__).parent, ROOT / "tests" / "models", ROOT / "tests" / "mcp"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

EXAMPLE_WORKSPACE = ROOT / "examples" / "workspace"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The example workspace, as every recorded run here finds it."""
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE_WORKSPACE, ws)
    return ws


@pytest.fixture
def replay_workspace(tmp_path: Path) -> Path:
    """A second copy, at another path: where a recorded run is replayed."""
    ws = tmp_path / "replay-ws"
    shutil.copytree(EXAMPLE_WORKSPACE, ws)
    return ws


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    return tmp_path / "traces"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A model API server on 127.0.0.1 (tests/models/model_server.py), with no proxy or model
    settings of the developer's in the way."""
    from model_server import ModelServer

    for name in ("OPENAI_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    srv = ModelServer()
    try:
        yield srv
    finally:
        srv.close()
