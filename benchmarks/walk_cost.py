"""What the confined path walk costs its three users per call, beside the system calls it makes.

`.venv/bin/python -m benchmarks.walk_cost [--calls 3000] [--repeat 7]` builds a small tree
(`src/pkg/m0.py` ... `m9.py`) in a temporary directory and times, with the process's CPU clock
(a loaded machine's waits are not counted), the child's `read_file` tool and its
`Workspace.locate` + open, `Workspace.describe` (what `complete` does per path), the file system
served to a foreign agent (`ConfinedFiles.read_text`), and the parent's evidence
(`recheck` of a result with 1 and 10 artifacts, `check_artifacts` of 10). The floor is the
system calls a walk to `src/pkg/m3.py` cannot do without (open the root and two directories,
`lstat` the file, close). Prints the best of `--repeat` rounds, in µs per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.child.tools import default_tools
from tether.child.workspace import Workspace
from tether.parent.providers.confined_fs import ConfinedFiles
from tether.parent.run.evidence import check_artifacts, recheck
from tether.protocol.messages import Artifact, RunResult, ToolApproveResult

_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Context:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.run_id = "bench"
        self.read_only = False

    async def approve(self, tool: str, arguments: Any) -> ToolApproveResult:
        return ToolApproveResult(allow=True)


def cases(root: Path) -> dict[str, Callable[[], object]]:
    workspace = Workspace(root)
    files = ConfinedFiles(root)
    tool = default_tools().get("read_file")
    assert tool is not None
    context = _Context(workspace)
    loop = asyncio.new_event_loop()
    arguments = {"path": "src/pkg/m3.py"}
    claimed = [
        Artifact(path=str(root / "src" / "pkg" / f"m{i}.py"), size=0, fs_type="file")
        for i in range(10)
    ]
    kept, _ = check_artifacts(str(root), claimed, [])
    one = RunResult(success=True, status="completed", artifacts=kept[:1])
    ten = RunResult(success=True, status="completed", artifacts=kept)
    assert recheck(str(root), ten) is ten

    def located() -> None:
        with workspace.locate("src/pkg/m3.py") as landing:
            os.close(landing.open(os.O_RDONLY))

    def floor() -> None:
        top = os.open(root, _FLAGS)
        src = os.open("src", _FLAGS, dir_fd=top)
        pkg = os.open("pkg", _FLAGS, dir_fd=src)
        os.stat("m3.py", dir_fd=pkg, follow_symlinks=False)
        for fd in (top, src, pkg):
            os.close(fd)

    return {
        "floor: 3 opens, an lstat, 3 closes": floor,
        "read_file tool (src/pkg/m3.py)": lambda: loop.run_until_complete(
            tool.run(context, arguments)
        ),
        "Workspace.locate + open": located,
        "Workspace.describe": lambda: workspace.describe("src/pkg/m3.py"),
        "ConfinedFiles.read_text": lambda: files.read_text("src/pkg/m3.py"),
        "recheck, 1 artifact": lambda: recheck(str(root), one),
        "recheck, 10 artifacts": lambda: recheck(str(root), ten),
        "check_artifacts, 10": lambda: check_artifacts(str(root), claimed, []),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="walk-cost-") as base:
        root = Path(base).resolve()
        (root / "src" / "pkg").mkdir(parents=True)
        for i in range(10):
            (root / "src" / "pkg" / f"m{i}.py").write_text("x = 1\n" * 50)
        for name, call in cases(root).items():
            rounds = timeit.repeat(
                call, number=args.calls, repeat=args.repeat, timer=time.process_time
            )
            print(f"{name:36s} {min(rounds) / args.calls * 1e6:8.2f} µs")


if __name__ == "__main__":
    main()
