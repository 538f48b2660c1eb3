"""Takes the run, says `started`, then waits. argv[1] decides what `agent/cancel` does:
`obey` answers the run `aborted` at once, `ignore` carries on as if nothing happened."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
run_id = run["params"]["runId"]
_wire.event(run_id, 1, "started")
while True:
    msg = _wire.recv()
    if msg is None or msg.get("method") == "exit":
        _wire.leave()
    if msg.get("method") == "shutdown":
        _wire.reply(msg["id"], None)
    if msg.get("method") == "agent/cancel" and sys.argv[1] == "obey":
        _wire.log("cancel received: aborting")
        _wire.reply(run["id"], _wire.run_result("aborted", message="stopped on request"))
