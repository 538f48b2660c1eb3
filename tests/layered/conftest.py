"""The layered-workspace tests: they share the orchestration tests' scripted models (`book`)
and the sandbox tests' non-root helpers; `--import-mode=importlib` puts no test folder on
`sys.path`, so this does."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).parent
for folder in (_HERE, _HERE.parent / "orchestrate", _HERE.parent / "sandbox"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
