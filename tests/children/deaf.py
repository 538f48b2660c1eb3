"""Takes the run and then ignores its lifeline (stdin EOF), but not signals: only the SIGTERM
rung ends it. The moment SIGTERM arrives goes to stderr as `sigterm`."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire


def on_term(sig: int, frame: object) -> None:
    _wire.log("sigterm")
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
_wire.wait_run()
os.close(0)  # the lifeline is cut by its own hand
while True:
    time.sleep(60)
