"""Takes the run, says something distinctive on stderr, and exits 1."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

_wire.wait_run()
_wire.log("starting the widget")
_wire.log("fatal: the flux capacitor overheated (exit-mid-run)")
sys.exit(1)
