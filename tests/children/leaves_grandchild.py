"""Takes the run, starts a grandchild that inherits its stdout and stderr, and exits 2.

The grandchild's pid goes to stderr as `grandchild=PID`.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

_wire.wait_run()
grandchild = subprocess.Popen(["sleep", "60"])
_wire.log(f"grandchild={grandchild.pid}")
os._exit(2)
