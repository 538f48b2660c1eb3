"""A supervisor run by the non-root tests as an ordinary user (uid 1000) with Debian's
/usr/bin/python3 and PYTHONPATH pointing at the project (tests/sandbox/test_non_root.py).

`user_host.py CONFIG_JSON`, CONFIG: {"mode", "workspace", "isolation", "read_paths"}:

- mode "attack": fills `targets.json` in the workspace with this supervisor's and keeper's
  pids, has a scripted model run `attacks.py` through bash (and write its `TMPDIR` to
  `tmpdir.txt`), prints the result as JSON;
- mode "hold": starts a run whose model never answers, prints {"supervisor", "keeper",
  "child"} once the child is up, and waits until its stdin closes;
- mode "acp": runs tests/children/acp_agent.py through the `acp` provider with `steps` (a
  JSON list) and a model that answers "gateway answers", prints {"result", "texts"};
- mode "store": spawns the hostile tests/children/store_rewriter.py (copied to `code`) as a
  continuable agent whose session store is `state`, prints {"refused": MESSAGE} when that is
  bad usage, else {"result"} (the child's report is in the workspace).
- mode "bash": runs `command` through bash in the sandbox (`allow_git_config` and `launcher`
  as given), prints {"result", "output", "unguarded"} (the last: why this host's sandbox
  cannot guard `.git`).
"""

import json
import os
import sys
from pathlib import Path

import anyio
import msgspec

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.limits import DisposePolicy
from tether.parent.supervisor import ChildConfig, Supervisor

PY = sys.executable


def _config(c: dict) -> ChildConfig:  # type: ignore[type-arg]
    return ChildConfig(
        allow_git_config=c.get("allow_git_config", False),
        launcher=c.get("launcher", "local"),
        command=(PY, "-m", "tether.child"),  # not -I: PYTHONPATH finds the project
        pass_env=("PYTHONPATH",),
        isolation=c["isolation"],
        read_paths=c["read_paths"],
        dispose=DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=1.0),
        handshake_timeout=30,
    )


async def attack(c: dict) -> None:  # type: ignore[type-arg]
    ws = c["workspace"]
    command = f'{PY} attacks.py targets.json > report.json 2>&1; echo "$TMPDIR" > tmpdir.txt'
    turns = {
        "turns": [
            {"text": "", "toolCalls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "done"}}]},
        ]
    }
    async with Supervisor(_config(c)) as sup:
        keeper = sup._keeper_ready()  # started with the first child; the attack needs it now
        assert keeper is not None
        path = Path(ws, "targets.json")
        targets = json.loads(path.read_text())
        targets.update(supervisor=os.getpid(), keeper=keeper.pid, wire=True)
        path.write_text(json.dumps(targets))
        result = await sup.run(
            "x", agent="tester", workspace=ws, model=ScriptedModel.from_json(json.dumps(turns))
        )
    sys.stdout.write(msgspec.json.encode(result).decode() + "\n")


async def hold(c: dict) -> None:  # type: ignore[type-arg]
    slow = ScriptedModel.from_json('{"turns": [{"text": "thinking", "delay": 60}]}')
    async with Supervisor(_config(c)) as sup:
        handle = await sup.start("wait", workspace=c["workspace"], model=slow)
        with anyio.fail_after(30):
            while handle._child is None or handle._child.endpoint.quiet_for() > 5:
                await anyio.sleep(0.02)
            await anyio.sleep(0.5)  # the handshake is answered: the wire is claimed
        keeper = sup._keeper  # started with the run's child
        assert keeper is not None
        pids = {"supervisor": os.getpid(), "keeper": keeper.pid, "child": handle.pid}
        sys.stdout.write(json.dumps(pids) + "\n")
        sys.stdout.flush()
        await anyio.to_thread.run_sync(sys.stdin.read)
        handle.abort()
        await handle.result()


async def acp(c: dict) -> None:  # type: ignore[type-arg]
    from tether.parent.run.events import ChildEvent

    agent = Path(__file__).resolve().parent.parent / "children" / "acp_agent.py"
    model = ScriptedModel.from_json('{"turns": [{"text": "gateway answers"}]}')
    events: list[ChildEvent] = []

    def keep(event: object) -> None:
        if isinstance(event, ChildEvent) and event.kind == "text":
            events.append(event)

    async with Supervisor(_config(c)) as sup:
        result = await sup.run(
            json.dumps(c["steps"]),
            workspace=c["workspace"],
            model=model,
            provider=f"acp:{PY} {agent}",
            on_event=keep,
        )
    texts = [e.data["text"] for e in events]
    out = {"result": msgspec.to_builtins(result), "texts": texts}
    sys.stdout.write(json.dumps(out) + "\n")


async def store(c: dict) -> None:  # type: ignore[type-arg]
    model = ScriptedModel.from_json('{"turns": [{"text": "fine"}]}')
    async with Supervisor(_config(c), state_dir=c["state"]) as sup:
        try:
            agent = await sup.spawn_agent(
                "go",
                workspace=c["workspace"],
                command=[PY, "-I", str(Path(c["code"], "store_rewriter.py"))],
                model=model,
                keep_alive=0,
            )
        except ValueError as exc:
            sys.stdout.write(json.dumps({"refused": str(exc)}) + "\n")
            return
        result = await agent.result()
    sys.stdout.write(json.dumps({"result": msgspec.to_builtins(result)}) + "\n")


async def bash(c: dict) -> None:  # type: ignore[type-arg]
    from tether.parent.process.isolation import probe_host
    from tether.parent.run.events import ChildEvent

    turns = {
        "turns": [
            {"text": "", "toolCalls": [{"name": "bash", "arguments": {"command": c["command"]}}]},
            {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "done"}}]},
        ]
    }
    outputs: list[str] = []

    def keep(event: object) -> None:
        if isinstance(event, ChildEvent) and event.kind == "tool_result":
            outputs.append(str(event.data.get("content", "")))

    async with Supervisor(_config(c)) as sup:
        result = await sup.run(
            "x",
            agent="tester",
            workspace=c["workspace"],
            model=ScriptedModel.from_json(json.dumps(turns)),
            on_event=keep,
        )
    out = {
        "result": msgspec.to_builtins(result),
        "output": outputs[0] if outputs else "",
        "unguarded": probe_host().git_unguarded,
    }
    sys.stdout.write(json.dumps(out) + "\n")


config = json.loads(sys.argv[1])
modes = {"attack": attack, "acp": acp, "store": store, "hold": hold, "bash": bash}
anyio.run(modes[config["mode"]], config)
