"""Takes the run, starts three grandchildren (a plain one, one in a session of its own, one with
an empty environment), reports the pids in a `text` event as {"child", "grandchildren"}, and
sleeps, deaf to its stdin."""

import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
plain = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
detached = subprocess.Popen(
    ["sleep", "60"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
)
# Without the tree marker, but still in the child's session.
unmarked = subprocess.Popen(
    [shutil.which("sleep") or "/bin/sleep", "60"],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    env={},
)
pids = {"child": os.getpid(), "grandchildren": [plain.pid, detached.pid, unmarked.pid]}
_wire.event(run["params"]["runId"], 1, "text", pids)
while True:
    time.sleep(60)
