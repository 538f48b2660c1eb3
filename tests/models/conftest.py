"""Fixtures for the model provider tests: a real HTTP server on 127.0.0.1, and an environment
without the developer's own model settings or proxies (so loopback requests go straight to it).

`--import-mode=importlib` does not put test folders on `sys.path`; this adds this one so the
tests can import the shared `model_server` module.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from model_server import ModelServer  # noqa: E402

_CLEARED = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture(autouse=True)
def clean_model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[ModelServer]:
    srv = ModelServer()
    try:
        yield srv
    finally:
        srv.close()
