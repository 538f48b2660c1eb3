"""A protocol-speaking child (standard library only, no tether) that runs the network probes
of `plan.json` in its workspace (`net_probes.py`, beside this file), writes `report.json`
there and answers the run. Started as `python net_child.py`: its own folder is all a sandbox
has to let it read besides the interpreter."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import net_probes

_in = sys.stdin.buffer


def send(msg: dict) -> None:  # type: ignore[type-arg]
    data = (json.dumps(msg) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def recv() -> dict | None:  # type: ignore[type-arg]
    line = _in.readline()
    return json.loads(line) if line else None


def main() -> None:
    while True:
        msg = recv()
        if msg is None:
            return
        method = msg.get("method")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "result": {
                        "protocolVersion": 1,
                        "serverInfo": {"name": "net-child", "version": "0"},
                        "pid": os.getpid(),
                    },
                }
            )
        elif method == "agent/run":
            workspace = msg["params"]["workspace"]
            with open(os.path.join(workspace, "plan.json")) as f:
                report = net_probes.run(json.load(f))
            with open(os.path.join(workspace, "report.json"), "w") as f:
                json.dump(report, f, indent=1)
            send(
                {
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "result": {"success": True, "status": "completed", "summary": "probed"},
                }
            )
        elif method == "shutdown":
            send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        elif method == "exit":
            return


main()
