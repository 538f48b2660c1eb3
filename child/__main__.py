"""`python -I -m tether.child`: a tether child speaking wire protocol v1 on its stdin/stdout."""

# The wire moves to private fds before anything else is imported or run: from here on a stray
# print() or a subprocess writing to fd 1 lands on stderr, never in the protocol stream.
from tether.child.fdguard import claim_wire

_WIRE = claim_wire()

import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import anyio  # noqa: E402

from tether.child.server import serve  # noqa: E402


def main() -> None:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="tether-child: %(levelname)s %(message)s"
    )
    code = anyio.run(serve, _WIRE, backend="asyncio")
    sys.stderr.flush()
    # os._exit: worker threads (a tool blocked in a syscall) must not hold the process open.
    os._exit(code)


if __name__ == "__main__":
    main()
