"""A parent process for the test that SIGKILLs its parent: it runs a Supervisor whose child is
`spawner.py`, prints one JSON line `{"child": PID, "grandchildren": [PID, ...]}` on stdout once
the child reports, and then waits for a run that never ends."""

import json
import os
import sys

import anyio

from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import ChildConfig, Supervisor

HERE = os.path.dirname(os.path.abspath(__file__))


async def main() -> None:
    def on_event(ev: Event) -> None:
        if isinstance(ev, ChildEvent) and ev.kind == "text":
            sys.stdout.write(json.dumps(ev.data) + "\n")
            sys.stdout.flush()

    config = ChildConfig(dispose=DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0))
    async with Supervisor(config) as sup:
        await sup.run(
            "sleep",
            workspace=HERE,
            command=[sys.executable, "-I", os.path.join(HERE, "spawner.py")],
            on_event=on_event,
        )


anyio.run(main)
