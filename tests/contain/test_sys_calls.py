"""The system calls every child makes go through `_ctypes` alone, and behave as `ctypes` would."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import termios

from tether.wire import streams

PROBE = """
import json, signal, sys
from tether.contain import _sys, privileges
privileges.set_pdeathsig(signal.SIGUSR1)
privileges.set_dumpable(False)
loaded_before = "ctypes" in sys.modules
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
sig = ctypes.c_int(-1)
assert libc.prctl(2, ctypes.byref(sig), 0, 0, 0) == 0  # PR_GET_PDEATHSIG
try:
    _sys.prctl(0x7FFFFFFF)
    refused = None
except OSError as exc:
    refused = exc.errno
print(json.dumps({"ctypes_loaded": loaded_before, "deathsig": sig.value,
                  "dumpable": libc.prctl(3, 0, 0, 0, 0), "refused": refused}))
"""


def test_prctl_through_ctypes_own_extension_sets_what_ctypes_reads_back() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-c", PROBE], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "ctypes_loaded": False,
        "deathsig": int(signal.SIGUSR1),
        "dumpable": 0,
        "refused": 22,  # EINVAL, read through the same errno ctypes keeps
    }


def test_the_wires_fionread_is_the_one_termios_defines() -> None:
    assert streams._FIONREAD == termios.FIONREAD
