"""The child runtime's main, once the wire is claimed: shared by `python -m tether.child` and
the zygote's forked children (`zygote.py`), which both run `fdguard.claim_wire()` first.

Importing this module has no side effects on the process's file descriptors.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import TYPE_CHECKING

import anyio

from tether.child.fdguard import WireFds
from tether.child.server import serve

if TYPE_CHECKING:
    from tether.child.runs import AgentFactory

ENV_VAR = "TETHER_AGENT"  # agent_spec.ENV_VAR; that module loads only when an agent is named

EXIT_BAD_AGENT = 3


def _agent_option(argv: list[str]) -> str | None:
    import argparse  # only for a child given a command line: most have none

    parser = argparse.ArgumentParser(prog="python -I -m tether.child")
    parser.add_argument(
        "--agent",
        metavar="SPEC",
        help=f"host this agent ('pkg.module:callable' or '/path/file.py:callable'; "
        f"default: ${ENV_VAR}, else the built-in loop)",
    )
    agent: str | None = parser.parse_args(argv).agent
    return agent


def _agent_factory(argv: list[str]) -> AgentFactory | None:
    # No command line, no parser: building one costs about a millisecond (and importing
    # argparse more), on every child's way to `initialize`.
    spec = (_agent_option(argv) if argv else None) or os.environ.get(ENV_VAR) or None
    if spec is None:
        return None
    from tether.child.agent_spec import AgentSpecError, load_agent_factory

    try:
        return load_agent_factory(spec)
    except AgentSpecError as exc:
        print(f"tether-child: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(EXIT_BAD_AGENT)


def run(wire: WireFds, argv: list[str]) -> None:
    """Serve the protocol on `wire` until the parent is done, then end the process."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="tether-child: %(levelname)s %(message)s"
    )
    factory = _agent_factory(argv)
    code = anyio.run(functools.partial(serve, wire, agent_factory=factory), backend="asyncio")
    sys.stderr.flush()
    # os._exit: worker threads (a tool blocked in a syscall) must not hold the process open.
    os._exit(code)
