"""Writes what it was started with to the JSON file argv[1], then answers the run.

Recorded: its environment (as Python sees it, and raw from /proc/self/environ), pid, session
and group ids, parent-death signal, the text of /proc/self/limits, and the pids /proc lists.
"""

import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire


def pdeathsig() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    sig = ctypes.c_int(-1)
    pr_get_pdeathsig = 2
    libc.prctl(pr_get_pdeathsig, ctypes.byref(sig), 0, 0, 0)
    return sig.value


run = _wire.wait_run()
with open("/proc/self/limits") as f:
    limits = f.read()
with open("/proc/self/environ", "rb") as f:
    raw = f.read()
report = {
    "environ": dict(os.environ),
    "proc_environ": [item.decode("utf-8", "replace") for item in raw.split(b"\0") if item],
    "pid": os.getpid(),
    "sid": os.getsid(0),
    "pgid": os.getpgid(0),
    "pdeathsig": pdeathsig(),
    "limits": limits,
    "proc_pids": sorted(int(name) for name in os.listdir("/proc") if name.isdigit()),
}
with open(sys.argv[1], "w") as f:
    json.dump(report, f)
_wire.reply(run["id"], _wire.run_result(summary="environment written"))
_wire.serve_until_exit()
