"""A hostile child that tries to disarm its guards for real: it writes the keeper's farewell
through every /proc path to the keeper's pipe, SIGSTOPs the keeper and SIGKILLs the
supervisor; then it starts grandchildren (one in a session of its own, one with an empty
environment), reports {"child", "grandchildren", "outcomes"} in a `text` event and sleeps."""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "children")
)
import _wire
import attacks


def keeper_of(supervisor: int) -> int:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if b"_keeper.py" in cmdline and ppid == supervisor:
            return int(name)
    raise SystemExit("no keeper found")


run = _wire.wait_run()
supervisor = os.getppid()
keeper = keeper_of(supervisor)
outcomes = {
    "keeper_pipe_reopen": attacks.outcome(lambda: attacks.reopen_fds(keeper, b"bye\n")),
    "supervisor_fd_reopen": attacks.outcome(lambda: attacks.reopen_fds(supervisor, b"bye\n")),
    "keeper_sigstop": attacks.outcome(lambda: os.kill(keeper, signal.SIGSTOP)),
    "keeper_sigkill": attacks.outcome(lambda: os.kill(keeper, signal.SIGKILL)),
    "supervisor_sigkill": attacks.outcome(lambda: os.kill(supervisor, signal.SIGKILL)),
}
quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
plain = subprocess.Popen(["sleep", "60"], **quiet)
detached = subprocess.Popen(["sleep", "60"], start_new_session=True, **quiet)
unmarked = subprocess.Popen(["/bin/sleep", "60"], env={}, **quiet)
report = {
    "child": os.getpid(),
    "keeper": keeper,
    "grandchildren": [plain.pid, detached.pid, unmarked.pid],
    "outcomes": outcomes,
}
_wire.event(run["params"]["runId"], 1, "text", report)
while True:
    time.sleep(60)
