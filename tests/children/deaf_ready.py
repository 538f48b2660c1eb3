"""Answers `initialize`, then reads and ignores everything: `shutdown`, `exit` and stdin's EOF.
With `term` among its arguments, it leaves on SIGTERM (writing `sigterm` to stderr first);
without, it ignores SIGTERM too and only SIGKILL ends it. With `mute`, it never reads stdin
(nor answers `initialize`). It writes `armed` to stderr once its SIGTERM disposition is set."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire


def on_term(sig: int, frame: object) -> None:
    _wire.log("sigterm")
    os._exit(0)


signal.signal(signal.SIGTERM, on_term if "term" in sys.argv[1:] else signal.SIG_IGN)
_wire.log("armed")
if "mute" not in sys.argv[1:]:
    _wire.handshake()
    while _wire.recv() is not None:
        pass
    _wire.log("eof, and staying")
while True:
    time.sleep(60)
