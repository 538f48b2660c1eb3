"""Floor: a bare child that says it is up, waits for a line, then writes the CLOCK_MONOTONIC
time to stdout and SIGSEGVs itself."""

import os
import signal
import sys
import time

sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
os.write(1, f"crash-at {time.monotonic_ns()}\n".encode())
os.kill(os.getpid(), signal.SIGSEGV)
