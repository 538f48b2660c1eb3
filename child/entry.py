"""The child runtime's main, once the wire is claimed: shared by `python -m tether.child` and
the zygote's forked children (`zygote.py`), which both run `fdguard.claim_wire()` first.

Importing this module has no side effects on the process's file descriptors.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import sys
from typing import TYPE_CHECKING

import anyio

from tether.child.fdguard import WireFds
from tether.child.server import serve
from tether.contain.inplace import joined

if TYPE_CHECKING:
    from tether.child.runs import AgentFactory

ENV_VAR = "TETHER_AGENT"  # agent_spec.ENV_VAR; that module loads only when an agent is named

EXIT_BAD_AGENT = 3


def _agent_factory(argv: list[str]) -> AgentFactory | None:
    spec = _agent_spec(argv) if argv else os.environ.get(ENV_VAR) or None
    if spec is None:
        return None
    from tether.child.agent_spec import AgentSpecError, load_agent_factory

    try:
        return load_agent_factory(spec)
    except AgentSpecError as exc:
        print(f"tether-child: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(EXIT_BAD_AGENT)


def _agent_spec(argv: list[str]) -> str | None:
    # argparse loads only when there are arguments to parse: the usual child has none.
    import argparse

    parser = argparse.ArgumentParser(prog="python -I -m tether.child")
    parser.add_argument(
        "--agent",
        metavar="SPEC",
        help=f"host this agent ('pkg.module:callable' or '/path/file.py:callable'; "
        f"default: ${ENV_VAR}, else the built-in loop)",
    )
    args = parser.parse_args(argv)
    return str(args.agent) if args.agent else os.environ.get(ENV_VAR) or None


def run(wire: WireFds, argv: list[str]) -> None:
    """Serve the protocol on `wire` until the parent is done, then end the process."""
    configure_logging()
    # A child run in place by its trampoline may still be joining its cgroups: nothing of an
    # agent's loads, and nothing is read from the wire, before it is in them.
    joined()
    factory = _agent_factory(argv)
    _end_startup()
    code = anyio.run(functools.partial(serve, wire, agent_factory=factory), backend="asyncio")
    sys.stderr.flush()
    # os._exit: worker threads (a tool blocked in a syscall) must not hold the process open.
    os._exit(code)


def configure_logging() -> None:
    """The child's log lines go to stderr, marked as the child's. Idempotent: a zygote's
    standby configures it before it parks (in a forked child, setting a level walks every
    logger, and each write copies a page shared with the zygote: ≈ 0.2 ms of a spawn)."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="tether-child: %(levelname)s %(message)s"
    )


def _end_startup() -> None:
    """Freeze what start-up built and turn the cyclic collector back on.

    `python -I -m tether.child` and the trampoline turn the collector off before the first
    import: each of the ≈ 30 collections the imports would trigger walks a young generation
    of objects that all live for good (modules, classes, functions). Freezing moves them out
    of the collector's view in one step (`gc.freeze` relinks list heads), so neither the first
    collection after start-up nor any later full one walks them: ≈ 6 ms of a ≈ 80 ms cold
    start (benchmarks/notes.md, spawn_ready). What the imports left as cyclic garbage
    (≈ 600 objects, ≈ 120 KiB, mostly discarded helper classes) stays with them. A zygote's
    child, forked with the collector on and its runtime already frozen, moves only what it
    built since the fork.
    """
    import anyio._backends._asyncio  # noqa: F401  anyio.run would import it after the freeze

    gc.freeze()
    gc.enable()
