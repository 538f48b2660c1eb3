"""A parent for the test that SIGKILLs it: a Supervisor with `spawner="zygote"` whose child
starts a grandchild in a session of its own; prints one JSON line `{"child", "grandchild",
"zygote"}` once the child reports, then waits for a run that never ends."""

import json
import os
import sys

import anyio

from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import ChildConfig, Supervisor

HERE = os.path.dirname(os.path.abspath(__file__))


async def main() -> None:
    config = ChildConfig(
        spawner="zygote", dispose=DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0)
    )
    async with Supervisor(config) as sup:

        def on_event(ev: Event) -> None:
            if isinstance(ev, ChildEvent) and ev.kind == "report":
                got = {"child": ev.data["pid"], "grandchild": ev.data["grandchild"]}
                got["zygote"] = sup.zygote_pid
                sys.stdout.write(json.dumps(got) + "\n")
                sys.stdout.flush()

        await sup.run(
            "grandchild",
            agent=os.path.join(HERE, "agents.py") + ":act",
            workspace=HERE,
            on_event=on_event,
        )


anyio.run(main)
