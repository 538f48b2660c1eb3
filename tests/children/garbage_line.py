"""Takes the run, writes a line that is not JSON, then behaves."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

_wire.wait_run()
_wire.write_raw(b"Traceback (most recent call last): this is not JSON\n")
_wire.serve_until_exit()
