"""Ctrl-C during a run: the first SIGINT or SIGTERM asks the child to abort, a second cuts it."""

from __future__ import annotations

import argparse
import signal
import sys

import anyio
from anyio.abc import TaskGroup

from tether.parent.run.handle import RunHandle


async def cancel_on_signal(handle: RunHandle, args: argparse.Namespace, tg: TaskGroup) -> None:
    """SIGINT or SIGTERM asks the child to abort (the result is still printed); a second one
    cuts the run at once. Either way the child's tree is taken down before tether exits."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            args.interrupted = signum
            if args.interrupted_once:
                handle.abort()
                return
            args.interrupted_once = True
            print(f"tether: {signal.Signals(signum).name}: cancelling the run", file=sys.stderr)
            tg.start_soon(handle.cancel, "interrupted")
