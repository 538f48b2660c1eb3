"""`tether conformance -- CMD [ARGS...]`: check that any child command speaks wire protocol v1.

Theory of operation
-------------------
The kit plays the parent, but through its own thin pump over the connection core rather than
through the supervisor, so it can send bytes no well-behaved parent would (broken JSON, invalid
envelopes, a line past the byte cap). Each check starts a fresh child in its own session and
process group (`wire.Wire`), drives it with deadlines on every wait, and always ends by
SIGKILLing that process group and reaping the child, whatever the check found. Anything the
child writes that is not protocol v1 is recorded (the last check reports all of it). Requests
from the child are answered as a parent would: `model/complete` with a scripted turn that calls
`complete` (or, in the cancel check, never), `tool/approve` with `allow: true`.

A check passes when it returns and fails with `CheckFailed` carrying a sentence that says what
the child did wrong. Output is one line per check (`PASS name` / `FAIL name: why`) and a closing
`N passed, N failed`. The checks live in `checks.py`, the runner and the command line in
`suite.py`.
"""

from tether.parent.conformance.checks import CHECK_NAMES, CHECKS, Check
from tether.parent.conformance.suite import (
    Outcome,
    Report,
    add_arguments,
    main,
    run_check,
    run_suite,
)
from tether.parent.conformance.wire import CheckFailed, Wire

__all__ = [
    "CHECKS",
    "CHECK_NAMES",
    "Check",
    "CheckFailed",
    "Outcome",
    "Report",
    "Wire",
    "add_arguments",
    "main",
    "run_check",
    "run_suite",
]
