"""What a workspace snapshot costs (the verifier policy's before/after diff).

`.venv/bin/python -m benchmarks.snapshot_cost [--files 10000] [--rounds 11]` builds a tree of
that many small files (100 per directory) in a temporary directory, then times, interleaved
round by round, `take_snapshot` (scandir + one lstat per entry) against a floor that only lists
the directories (scandir, no lstat), and a `diff` of two snapshots. Prints medians and minima.

`--watch` times instead what every run with a workspace pays: the watch of the files the
user's own tools run (`tether.parent.run.sensitive.take`, twice a run, and `changes`), in an
empty workspace and in one holding a fresh git repository, `package.json`, `pyproject.toml`,
a `Makefile` and a `.vscode` directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time

from tether.parent.delegation.snapshot import diff, take_snapshot
from tether.parent.run import sensitive


def list_only(root: str) -> int:
    count, stack = 0, [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                else:
                    count += 1
    return count


def watch(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as full:
        subprocess.run(["git", "init", "-q", full], check=True)
        files = {
            "package.json": '{"name": "x", "scripts": {"test": "jest"}}',
            "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n[project]\nname = "x"\n',
            "Makefile": "all:\n\ttrue\n",
            ".vscode/settings.json": "{}",
        }
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(full, rel)), exist_ok=True)
            with open(os.path.join(full, rel), "w") as fh:
                fh.write(text)
        for name, root in (("empty workspace", empty), ("project + repository", full)):
            took = []
            for _ in range(rounds * 20):
                t = time.perf_counter()
                before = sensitive.take(root)
                assert sensitive.changes(before, sensitive.take(root), root) == []
                took.append(time.perf_counter() - t)
            print(
                f"{name:>22}: a run's watch (take, take, changes): median "
                f"{statistics.median(took) * 1e6:6.0f} µs, min {min(took) * 1e6:6.0f} µs "
                f"({len(before.entries)} entries)"
            )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--watch", action="store_true")
    args = p.parse_args()
    if args.watch:
        watch(args.rounds)
        return
    with tempfile.TemporaryDirectory() as root:
        for i in range(args.files):
            d = os.path.join(root, f"d{i // 100}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"f{i}.txt"), "w") as fh:
                fh.write("x" * (i % 200))
        snap, floor, dif = [], [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            assert list_only(root) == args.files
            floor.append(time.perf_counter() - t)
            a = take_snapshot(root)
            snap.append(a.seconds)
            b = take_snapshot(root)
            t = time.perf_counter()
            assert len(diff(a, b)) == 0
            dif.append(time.perf_counter() - t)
        for name, xs in (("snapshot", snap), ("list-only floor", floor), ("diff", dif)):
            print(
                f"{name:>16}: median {statistics.median(xs) * 1000:6.1f} ms, "
                f"min {min(xs) * 1000:6.1f} ms  ({args.files} files)"
            )


if __name__ == "__main__":
    main()
