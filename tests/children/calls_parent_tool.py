"""A hostile child: takes the run and asks the parent to run a `task` it was never offered,
then answers the run with what the parent said (`error CODE MESSAGE` or `ok CONTENT`)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
run_id = run["params"]["runId"]
_wire.request(1, "tool/call", {"runId": run_id, "name": "task", "arguments": {"prompt": "x"}})
while True:
    msg = _wire.recv()
    if msg is None:
        _wire.leave()
    if msg.get("id") == 1 and "method" not in msg:
        break
if "error" in msg:
    summary = f"error {msg['error']['code']} {msg['error']['message']}"
else:
    summary = f"ok {msg['result']['content']}"
_wire.reply(run["id"], _wire.run_result(summary=summary))
_wire.serve_until_exit()
