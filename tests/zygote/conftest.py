"""The zygote tests: `--import-mode=importlib` does not put test folders on `sys.path`; this
adds this one so the tests can import the shared `act_reports` module."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
