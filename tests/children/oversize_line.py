"""Takes the run, then writes argv[1] megabytes (default 50) of one line without a newline."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

_wire.wait_run()
megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 50
chunk = b"x" * (1 << 20)
try:
    for _ in range(megabytes):
        _wire.write_raw(chunk)
    _wire.write_raw(b"\n")
except BrokenPipeError:
    sys.exit(0)
_wire.serve_until_exit()
