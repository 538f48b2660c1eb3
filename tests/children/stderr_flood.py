"""Takes the run, writes argv[2] megabytes (default 50) to stderr, then a last line.

argv[1] says how it ends: `answer` answers the run with a valid RunResult, `fail` exits 1.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
megabytes = int(sys.argv[2]) if len(sys.argv) > 2 else 50
line = b"flooding stderr with noise " * 40 + b"\n"
block = line * ((1 << 20) // len(line))
for _ in range(megabytes):
    _wire.write_raw(block, fd=2)
_wire.log("last words: the flood is over")
if sys.argv[1] == "fail":
    sys.exit(1)
_wire.reply(run["id"], _wire.run_result(summary="survived the flood"))
_wire.serve_until_exit()
