"""Floor: a bare child that says it is up, then waits for stdin to end and exits.

Any arguments are module names imported before it says so (to size what they cost).
"""

import importlib
import sys

for name in sys.argv[1:]:
    importlib.import_module(name)
sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.buffer.read()
