"""Nothing but the protocol reaches the wire, and the wire's end is the child's end."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from child_harness import DEADLINE, ChildProcess, run_params

# Runs the child's own fd set-up, then does everything a careless tool might: print, write to
# fd 1 from a shell and a subprocess, read stdin. Only the line written on the private wire fd
# may appear on stdout.
STRAY_WRITER = r"""
import os, subprocess, sys
from tether.child.fdguard import claim_wire
wire = claim_wire()
print("stray print")
sys.stdout.write("stray write\n")
sys.stdout.flush()
os.write(1, b"raw fd 1\n")
os.system("echo from a shell; cat")
subprocess.run(["sh", "-c", "echo from a subprocess; echo to stderr >&2; cat"], check=True)
leaked = sys.stdin.read()
assert not os.get_inheritable(wire.read_fd) and not os.get_inheritable(wire.write_fd)
request = os.read(wire.read_fd, 1000)
os.write(wire.write_fd, b'{"jsonrpc": "2.0", "id": 1, "result": {"stdin": %d, "echo": %d}}\n'
         % (len(leaked), len(request)))
"""


def test_a_stray_print_and_subprocesses_writing_to_fd_1_cannot_corrupt_the_wire() -> None:
    request = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
    done = subprocess.run(
        [sys.executable, "-I", "-c", STRAY_WRITER],
        input=request,
        capture_output=True,
        timeout=DEADLINE * 2,
        check=True,
    )
    # Only the protocol line is on stdout; the wire still held the parent's bytes (nobody read
    # them through fd 0), and every stray write went to stderr.
    expected = b'{"jsonrpc": "2.0", "id": 1, "result": {"stdin": 0, "echo": %d}}\n' % len(request)
    assert done.stdout == expected
    for text in (
        b"stray print",
        b"stray write",
        b"raw fd 1",
        b"from a shell",
        b"from a subprocess",
    ):
        assert text in done.stderr


def test_the_child_exits_within_a_second_of_stdin_eof_even_mid_run(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        child.request("agent/run", run_params("r1", tmp_path))
        child.expect_request("model/complete")  # the run now waits on the parent
        closed = time.monotonic()
        child.close_stdin()
        code = child.wait_exit(timeout=DEADLINE)
        assert time.monotonic() - closed < 1.0
        assert code == 0


def test_the_child_exits_within_a_second_of_stdin_eof_when_idle() -> None:
    with ChildProcess() as child:
        child.initialize()
        closed = time.monotonic()
        child.close_stdin()
        child.wait_exit(timeout=DEADLINE)
        assert time.monotonic() - closed < 1.0


def test_the_child_exits_when_stdin_ends_before_initialize() -> None:
    with ChildProcess() as child:
        child.close_stdin()
        assert child.wait_exit() == 0
