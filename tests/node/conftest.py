"""Node.js is required, not optional: these tests fail loudly when it is missing."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def node() -> str:
    found = shutil.which("node")
    assert found, (
        "Node.js is needed for the tests of examples/node-child and examples/node-driver: run "
        "scripts/test (it installs the Debian nodejs package when node is missing)"
    )
    return found
