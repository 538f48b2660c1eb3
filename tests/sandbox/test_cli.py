"""`tether run` at the sandbox level: the result names the level and ABI, and a relative
script path in `--command` still works although a sandboxed child starts in its workspace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sandbox_targets import CHILDREN, needs_sandbox

pytestmark = needs_sandbox


def test_tether_run_sandboxes_a_command_named_by_a_relative_path(tmp_path: Path) -> None:
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.parent.cli",
            "run",
            "hi",
            "--workspace",
            str(tmp_path),
            "--command",
            f"{sys.executable} -I children/answer_and_exit.py",
            "--isolation",
            "sandbox",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHILDREN.parent,
    )
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout)
    assert result["isolation"]["level"] == "sandbox"
    assert result["isolation"]["landlockAbi"] >= 1 and result["isolation"]["warning"] is None
