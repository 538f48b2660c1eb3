"""A supervisor with a network policy run as an ordinary user (uid 1000) by
tests/egress/test_non_root.py, with Debian's /usr/bin/python3 and PYTHONPATH pointing at the
project: `user_net_host.py CONFIG_JSON`, CONFIG: {"workspace", "allow", "names",
"read_paths"}. It runs `net_probes.py plan.json report.json` in the workspace through a
scripted model's bash, the proxy resolving `names` (a stand-in table), and prints the result
as JSON."""

import json
import sys

import anyio
import msgspec

from tether.parent.egress.addresses import NameTable
from tether.parent.egress.seat import EgressOptions
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.limits import DisposePolicy
from tether.parent.supervisor import ChildConfig, Supervisor

PY = sys.executable


async def main(c: dict) -> None:  # type: ignore[type-arg]
    cfg = ChildConfig(
        command=(PY, "-m", "tether.child"),  # not -I: PYTHONPATH finds the project
        pass_env=("PYTHONPATH",),
        isolation="sandbox",
        read_paths=c["read_paths"],
        dispose=DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=1.0),
        handshake_timeout=30,
        network=c["allow"],
    )
    command = f"{PY} net_probes.py plan.json report.json"
    turns = {
        "turns": [
            {"text": "", "toolCalls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "done"}}]},
        ]
    }
    options = EgressOptions(resolver=NameTable(c["names"]))
    async with Supervisor(cfg, egress=options) as sup:
        result = await sup.run(
            "x",
            agent="tester",
            workspace=c["workspace"],
            model=ScriptedModel.from_json(json.dumps(turns)),
        )
    sys.stdout.write(msgspec.json.encode(result).decode() + "\n")


anyio.run(main, json.loads(sys.argv[1]))
