"""Takes the run, starts a grandchild that inherits its stdout and stderr, and exits 2.

The grandchild's pid goes to stderr as `grandchild=PID`, and the moment it exits as
`exiting_at=SECONDS` on the system's monotonic clock.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

_wire.wait_run()
grandchild = subprocess.Popen(["sleep", "60"])
_wire.log(f"grandchild={grandchild.pid}")
_wire.log(f"exiting_at={time.monotonic()!r}")  # CLOCK_MONOTONIC: the parent's clock too
os._exit(2)
