"""A supervisor run by tests/layered/test_as_user.py as an ordinary user (uid 1000) with
Debian's /usr/bin/python3 and PYTHONPATH pointing at the project.

`layered_host.py CONFIG_JSON`, CONFIG: {"workspace", "read_paths", "command"}: runs `command`
through bash in a sandboxed layered run (the method this host gives a non-root supervisor, or
the one `TETHER_LAYER_METHOD` forces), prints {"result", "output", "method", "layers"}: the
RunResult, the bash output, which layer this host gives, and the supervisor's kept layers
after a `Supervisor.apply` of the result (`apply`), else after it was discarded."""

import json
import sys

import anyio
import msgspec

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import layers
from tether.parent.process.limits import DisposePolicy
from tether.parent.supervisor import ChildConfig, Supervisor

PY = sys.executable


async def main(c: dict) -> None:  # type: ignore[type-arg]
    config = ChildConfig(
        command=(PY, "-m", "tether.child"),  # not -I: PYTHONPATH finds the project
        pass_env=("PYTHONPATH",),
        isolation="sandbox",
        read_paths=c["read_paths"],
        dispose=DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=1.0),
        handshake_timeout=30,
    )
    turns = {
        "turns": [
            {"text": "", "toolCalls": [{"name": "bash", "arguments": {"command": c["command"]}}]},
            {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "done"}}]},
        ]
    }
    async with Supervisor(config) as sup:
        result = await sup.run(
            "x",
            agent="tester",
            workspace=c["workspace"],
            model=ScriptedModel.from_json(json.dumps(turns)),
            workspace_mode="layered",
        )
        before = dict(msgspec.to_builtins(result))
        applied = await sup.apply(result) if c.get("apply") else None
        if applied is None and result.changes is not None:
            await sup.discard(result)  # nothing of a test's layer is left behind
        kept = sorted(sup.layers)
    support = layers.support()
    out = {
        "result": before,
        "output": "",
        "method": support.overlay or support.copy,
        "applied": msgspec.to_builtins(applied) if applied is not None else None,
        "layers": kept,
    }
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
