"""Sends many model/complete requests and then never reads again: the parent's answers pile up
in a pipe nobody drains. Its silence must still count as silence."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
run_id = run["params"]["runId"]
for i in range(400):
    _wire.request(1000 + i, "model/complete", {"runId": run_id, "messages": []})
time.sleep(60)  # deaf and silent: the idle limit must end this
