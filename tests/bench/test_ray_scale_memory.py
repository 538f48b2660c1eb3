"""The swarm-memory sampler of `benchmarks/ray_scale.py`: a local swarm's figure counts the
processes the swarm starts, and a process that was already there and exits meanwhile does not
take its memory off the peak (which once made 256 local children read 0.04 MiB)."""

from __future__ import annotations

import importlib.util
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def _load_ray_scale() -> ModuleType:
    """`benchmarks/ray_scale.py` (not a package on the test's path), loaded by its file."""
    spec = importlib.util.spec_from_file_location(
        "bench_ray_scale", ROOT / "benchmarks/ray_scale.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ray_scale = _load_ray_scale()
HOLDER = (
    "import sys, time\n"
    "block = bytearray(int(sys.argv[1]) << 20)\n"
    "block[::4096] = b'x' * len(block[::4096])\n"  # touched: resident, in the PSS
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def _holder(mib: int) -> subprocess.Popen[bytes]:
    """A child process holding `mib` MiB of touched memory, once it says so."""
    proc = subprocess.Popen([sys.executable, "-I", "-c", HOLDER, str(mib)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30.0)
    if not ready or proc.stdout.readline() != b"ready\n":
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
        pytest.fail(f"the {mib} MiB holder did not get ready within 30 s")
    return proc


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
    assert not [p for p in psutil.Process().children() if p.pid in {q.pid for q in procs}]


def test_a_local_swarm_counts_what_it_started_and_not_a_process_that_leaves_meanwhile(
    holders: list[subprocess.Popen[bytes]],
) -> None:
    holders.append(_holder(64))  # there before the phase, like a cluster's process
    t0 = time.monotonic()
    with ray_scale.peak_pss(new_only=True) as mem:
        holders[0].kill()  # leaves during the phase
        holders[0].wait(timeout=10)
        holders.append(_holder(24))  # started by the phase, like the swarm's children
        time.sleep(0.5)  # at least two samples while it is alive
    grew = (mem["peak"] - mem["before"]) / MIB
    assert 20 <= grew <= 40, grew
    assert time.monotonic() - t0 < ray_scale.SETTLE_SECONDS + 10


def test_over_ray_the_whole_tree_is_counted_processes_already_there_included(
    holders: list[subprocess.Popen[bytes]],
) -> None:
    holders.append(_holder(8))
    with ray_scale.peak_pss() as mem:
        holders.append(_holder(24))
        time.sleep(0.5)
    assert mem["before"] >= ray_scale._pss(holders[0].pid) >= 8 * MIB  # it was counted
    grew = (mem["peak"] - mem["before"]) / MIB
    assert 20 <= grew <= 40, grew
