"""Sends 200 model/complete requests at once, then answers the run with how many answers it
got back: the parent answers them all, a bounded number at a time."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

N = 200
run = _wire.wait_run()
run_id = run["params"]["runId"]
for i in range(N):
    _wire.request(1000 + i, "model/complete", {"runId": run_id, "messages": []})
answered = 0
while answered < N:
    msg = _wire.recv()
    if msg is None:
        _wire.leave()
    if "result" in msg or "error" in msg:
        answered += 1
_wire.reply(run["id"], _wire.run_result(summary=f"{answered} answers"))
_wire.serve_until_exit()
