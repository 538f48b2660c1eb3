"""`python -I -m tether.child [--agent SPEC]`: a tether child speaking wire protocol v1 on its
stdin/stdout.

`--agent SPEC` (or, without the flag, the `TETHER_AGENT` environment variable) hosts a user's
own agent instead of the built-in loop; see `agent_spec.py`. A SPEC that cannot be loaded ends
the child with status 3 before it answers anything, the reason on stderr.
"""

from __future__ import annotations

# No cyclic collection while the runtime imports: `entry.run` freezes what they built and
# turns the collector back on (see `entry._end_startup`).
import gc

gc.disable()

# The wire moves to private fds before anything else is imported or run: from here on a stray
# print() or a subprocess writing to fd 1 lands on stderr, never in the protocol stream.
from tether.child.fdguard import claim_wire  # noqa: E402

_WIRE = claim_wire()

import sys  # noqa: E402

from tether.child.entry import EXIT_BAD_AGENT as EXIT_BAD_AGENT  # noqa: E402
from tether.child.entry import run  # noqa: E402


def main() -> None:
    run(_WIRE, sys.argv[1:])


if __name__ == "__main__":
    main()
