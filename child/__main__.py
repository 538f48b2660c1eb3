"""`python -I -m tether.child [--agent SPEC]`: a tether child speaking wire protocol v1 on its
stdin/stdout.

`--agent SPEC` (or, without the flag, the `TETHER_AGENT` environment variable) hosts a user's
own agent instead of the built-in loop; see `agent_spec.py`. A SPEC that cannot be loaded ends
the child with status 3 before it answers anything, the reason on stderr.
"""

from __future__ import annotations

# The wire moves to private fds before anything else is imported or run: from here on a stray
# print() or a subprocess writing to fd 1 lands on stderr, never in the protocol stream.
from tether.child.fdguard import claim_wire

_WIRE = claim_wire()

import argparse  # noqa: E402
import functools  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

import anyio  # noqa: E402

from tether.child.server import serve  # noqa: E402

if TYPE_CHECKING:
    from tether.child.runs import AgentFactory

ENV_VAR = "TETHER_AGENT"  # agent_spec.ENV_VAR; that module loads only when an agent is named

EXIT_BAD_AGENT = 3


def _agent_factory(argv: list[str]) -> AgentFactory | None:
    parser = argparse.ArgumentParser(prog="python -I -m tether.child")
    parser.add_argument(
        "--agent",
        metavar="SPEC",
        help=f"host this agent ('pkg.module:callable' or '/path/file.py:callable'; "
        f"default: ${ENV_VAR}, else the built-in loop)",
    )
    args = parser.parse_args(argv)
    spec = args.agent or os.environ.get(ENV_VAR) or None
    if spec is None:
        return None
    from tether.child.agent_spec import AgentSpecError, load_agent_factory

    try:
        return load_agent_factory(spec)
    except AgentSpecError as exc:
        print(f"tether-child: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(EXIT_BAD_AGENT)


def main() -> None:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="tether-child: %(levelname)s %(message)s"
    )
    factory = _agent_factory(sys.argv[1:])
    code = anyio.run(functools.partial(serve, _WIRE, agent_factory=factory), backend="asyncio")
    sys.stderr.flush()
    # os._exit: worker threads (a tool blocked in a syscall) must not hold the process open.
    os._exit(code)


if __name__ == "__main__":
    main()
