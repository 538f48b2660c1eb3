"""The exit-cost probe (`benchmarks/exit_cost.py`) times real forks, reaps each one and refuses
arguments it cannot honour. Run as a process of its own, as `python -m benchmarks.exit_cost`
runs it: it forks, which a multi-threaded test runner should not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.exit_cost", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


def test_the_exit_probe_reports_the_median_time_to_see_a_forked_child_exit() -> None:
    done = _probe("--heap", "2", "--touch", "1", "--forks", "8")
    assert done.returncode == 0, done.stderr
    found = re.fullmatch(
        r"heap 2 MiB, each child copies 1 MiB: its exit is seen (\d+\.\d+) ms after its last "
        r"instruction \(median of 3\)\n",
        done.stdout,
    )
    assert found, done.stdout
    assert 0 < float(found[1]) < 1000  # a 2 MiB process's exit: far below a second


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (("--heap", "1", "--touch", "2"), "--touch cannot be more than --heap"),
        (("--forks", "5"), "--forks must be at least 6"),
    ],
)
def test_the_exit_probe_refuses_what_it_cannot_measure(
    args: tuple[str, ...], complaint: str
) -> None:
    done = _probe(*args)
    assert done.returncode == 2
    assert complaint in done.stderr
