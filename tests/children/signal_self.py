"""Takes the run, then kills itself with the signal named in argv[1] (SIGSEGV, SIGABRT, ...).

`abort` calls os.abort() instead, which is how C code dies on a failed assertion.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

_wire.wait_run()
_wire.log(f"about to die by {sys.argv[1]}")
if sys.argv[1] == "abort":
    os.abort()
os.kill(os.getpid(), getattr(signal, sys.argv[1]))
time.sleep(5)
_wire.log("still alive after the signal?")
sys.exit(3)
