"""Takes the run, starts two grandchildren (one in a session of its own), reports the pids in
a `text` event as {"child", "grandchildren"}, and sleeps, deaf to its stdin."""

import os
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
pids = {"child": os.getpid(), "grandchildren": [plain.pid, detached.pid]}
_wire.event(run["params"]["runId"], 1, "text", pids)
while True:
    time.sleep(60)
