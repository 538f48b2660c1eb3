"""Takes the run, leaves a setsid double-fork daemon behind, and then waits for the parent.

The daemon's pid goes to stderr as `daemon=PID` and, when argv[1] names a file, into that file
(a test that loses the supervisor's view of stderr can still find it). The child then sends
one progress event and sits on its lifeline: it exits 0 at stdin EOF and never answers the run,
so whatever ends the run is the parent's (or the engine's) doing. The daemon ignores SIGTERM
and SIGHUP, closes its stdio and sleeps for a minute: only a kill of its tree can end it.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # As /proc sees it: inside a PID namespace with a /proc of its own, the namespace's
        # pid (the tests map it to the host's by the pidfile in our command line).
        os.write(w, f"{os.readlink('/proc/self')}\n".encode())
        os.close(w)
        time.sleep(60)
    os._exit(0)
os.close(w)
daemon = int(os.read(r, 64).decode())
_wire.log(f"daemon={daemon}")
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write(str(daemon))
_wire.event(run["params"]["runId"], 1, "step", {"daemon": daemon})
while _wire.recv() is not None:
    pass
_wire.leave()
