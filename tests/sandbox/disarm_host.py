"""A supervisor for the keeper-disarm test: runs `disarmer.py` in the sandbox with the
workspace argv[1], prints the child's `text` event as one JSON line, and waits for a run that
never ends (the test SIGKILLs this process)."""

import json
import os
import sys

import anyio

from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import ChildConfig, Supervisor

HERE = os.path.dirname(os.path.abspath(__file__))
CHILDREN = os.path.join(os.path.dirname(HERE), "children")


async def main() -> None:
    def on_event(ev: Event) -> None:
        if isinstance(ev, ChildEvent) and ev.kind == "text":
            sys.stdout.write(json.dumps(ev.data) + "\n")
            sys.stdout.flush()

    config = ChildConfig(
        dispose=DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0),
        isolation="sandbox",
        read_paths=[CHILDREN],
    )
    async with Supervisor(config) as sup:
        await sup.run(
            "disarm",
            workspace=sys.argv[1],
            command=[sys.executable, "-I", os.path.join(HERE, "disarmer.py")],
            on_event=on_event,
        )


anyio.run(main)
