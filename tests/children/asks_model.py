"""Takes the run, asks the parent for one model turn, waits for the answer in silence, then
answers the run with the model's text as its summary (or exits 3 if the parent refused)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
run_id = run["params"]["runId"]
_wire.request(1, "model/complete", {"runId": run_id, "messages": [{"role": "user"}]})
while True:
    msg = _wire.recv()
    if msg is None:
        _wire.leave()
    if msg.get("id") == 1 and "method" not in msg:
        break
if "error" in msg:
    _wire.log(f"the parent refused: {msg['error']}")
    sys.exit(3)
_wire.reply(run["id"], _wire.run_result(summary=msg["result"]["message"]["content"]))
_wire.serve_until_exit()
