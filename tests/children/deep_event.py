"""Takes the run, sends one `agent/event` whose line nests DEPTH levels (argv[1]), then finishes
the run normally."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

depth = int(sys.argv[1])
run = _wire.wait_run()
run_id = run["params"]["runId"]
# Envelope, params and data are three levels; the arrays make up the rest.
data = {"nest": json.loads("[" * (depth - 3) + "]" * (depth - 3))}
_wire.event(run_id, 0, "report", data)
_wire.reply(run["id"], _wire.run_result(summary="sent a deep event"))
_wire.serve_until_exit()
