"""Answers the run with a valid RunResult and exits 0 in the same breath."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
_wire.reply(run["id"], _wire.run_result(summary="done and gone"))
os._exit(0)
