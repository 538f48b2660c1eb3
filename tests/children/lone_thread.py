"""A process whose main thread exits alone: another thread keeps it running while /proc shows
its thread-group leader (its pid) as a zombie. Tree sweeps that judge a process by its leader's
state take it for dead.

    python lone_thread.py PIDFILE [--setsid]      (or `python -c "$(cat lone_thread.py)" ...`)

Writes its pid to PIDFILE (appended, one line) once the other thread runs, then ends its main
thread with the exit(2) system call (not exit_group). `--setsid`: in a session of its own first.
The thread ignores nothing; only a kill of the process ends it.
"""

import ctypes
import os
import platform
import sys
import threading
import time

SYS_EXIT = {"x86_64": 60, "aarch64": 93}[platform.machine()]

if "--setsid" in sys.argv[2:]:
    os.setsid()
running = threading.Event()


def keep_running() -> None:
    running.set()
    while True:
        time.sleep(1)


threading.Thread(target=keep_running, daemon=False).start()
running.wait()
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\n")
ctypes.CDLL(None).syscall(SYS_EXIT, 0)
