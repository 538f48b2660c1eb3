"""Lets the tests here import the shared `delegation_runners` module (pytest runs with
`--import-mode=importlib`, which does not put test folders on `sys.path`)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).parent
for folder in (_HERE, _HERE.parent / "models"):  # and `model_server` from tests/models
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
