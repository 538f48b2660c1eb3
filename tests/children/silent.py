"""Takes the run and says nothing more; leaves on stdin EOF like a well-behaved child."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

_wire.wait_run()
_wire.log("thinking very quietly")
_wire.serve_until_exit()
