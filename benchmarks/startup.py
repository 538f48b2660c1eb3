"""A focused start-up measurement: cold spawn → ready of the tether child next to its floor, the
child's import time, and a prototype zygote (fork of a pre-imported child runtime).

    .venv/bin/python -m benchmarks.startup [--rounds N] [--no-zygote]

Every round takes one sample of each figure, interleaved, so they see the same load. Prints
medians (min-max); used for the before/after and the zygote decision in benchmarks/notes.md.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

import anyio
import psutil

from benchmarks.bench import (
    TETHER_CHILD,
    Samples,
    _fds,
    _readline,
    child_script,
    initialize,
    ms,
    popen,
    tethered,
)
from tether.parent.process.env import build_child_env

INIT = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
    b'{"protocolVersion":1,"clientInfo":{"name":"bench"}}}\n'
)


def import_ms() -> float:
    """Total of `python -X importtime -I -m tether.child </dev/null` (its top-level imports)."""
    got = subprocess.run(
        [sys.executable, "-X", "importtime", "-I", "-m", "tether.child"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    total = 0
    for line in got.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if m and not m.group(2).startswith(" "):
            total += int(m.group(1))
    return total / 1000


class Zygote:
    def __init__(self) -> None:
        self.sock, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [*child_script("zygote_proto.py"), str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=[theirs.fileno()],
            env=build_child_env(os.environ),
        )
        theirs.close()

    def fork_ready(self) -> tuple[float, int, int, int]:
        """Fork one child, handshake; (ms, pid, stdin fd, stdout fd)."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_w = os.open(os.devnull, os.O_WRONLY)
        t0 = time.perf_counter_ns()
        socket.send_fds(self.sock, [b"f"], [in_r, out_w, err_w])
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        buf = b""
        while not buf.endswith(b"\n"):
            buf += self.sock.recv(64)
        pid = int(buf)
        os.write(in_w, INIT)
        _readline(out_r)
        return ms(time.perf_counter_ns() - t0), pid, in_w, out_r

    def close(self) -> None:
        self.sock.close()
        self.proc.wait(10)


def uss(pid: int) -> float:
    return psutil.Process(pid).memory_full_info().uss / (1 << 20)


async def measure(rounds: int, zygote: bool) -> Samples:
    s = Samples()
    zy = Zygote() if zygote else None
    try:
        for rnd in range(rounds + 1):
            t0 = time.perf_counter_ns()
            with popen(child_script("floor_bare.py")) as proc:
                _readline(_fds(proc)[1])
                s["floor.spawn_line"].append(ms(time.perf_counter_ns() - t0))
                assert proc.stdin is not None
                proc.stdin.close()
            t0 = time.perf_counter_ns()
            async with tethered(TETHER_CHILD) as child:
                await initialize(child)
                s["tether.spawn_ready"].append(ms(time.perf_counter_ns() - t0))
                if rnd < 3:
                    await anyio.sleep(0.2)
                    s["tether.uss"].append(uss(child.pid))
            if zy is not None:
                took, pid, in_w, out_r = zy.fork_ready()
                s["zygote.fork_ready"].append(took)
                if rnd < 3:
                    await anyio.sleep(0.2)
                    s["zygote.uss"].append(uss(pid))
                os.close(in_w)  # EOF: the forked child exits; the zygote reaps it
                while os.read(out_r, 65536):
                    pass
                os.close(out_r)
            if rnd == 0:
                s.clear()
        for _ in range(3):
            s["tether.import_ms"].append(import_ms())
    finally:
        if zy is not None:
            zy.close()
    return s


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--no-zygote", action="store_true")
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    s = anyio.run(measure, args.rounds, not args.no_zygote, backend="asyncio")
    floor = statistics.median(s["floor.spawn_line"])
    for key, values in s.items():
        med = statistics.median(values)
        unit = "MiB" if "uss" in key else "ms"
        vs = unit == "ms" and key != "tether.import_ms"
        ratio = f"  {med / floor:.2f}x the floor" if vs else ""
        spread = f"({min(values):.2f}-{max(values):.2f}, n={len(values)})"
        print(f"{key:22} {med:8.2f} {unit} {spread}{ratio}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
