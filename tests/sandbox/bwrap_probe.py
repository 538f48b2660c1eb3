"""Takes the run, looks at what it was given inside bwrap (capabilities, no_new_privs, seccomp,
what it can open or create) and writes `probe.json` in its workspace, then answers."""

import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "children")
)
import _wire
import attacks

run = _wire.wait_run()
workspace = run["params"]["workspace"]
with open("/proc/self/status") as f:
    status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
report = {
    "status": {k: v.strip() for k, v in status.items() if k.startswith(("Cap", "NoNew", "Secc"))},
    "uid": os.getuid(),
    "read_etc_shadow": attacks.outcome(lambda: attacks.read("/etc/shadow")),
    "open_by_handle_at": attacks.outcome(lambda: attacks.handle_escape(workspace)),
    "cwd_canary": attacks.outcome(lambda: attacks.read(os.environ["CANARY_PATH"])),
    "mkdir_root": attacks.outcome(lambda: os.mkdir("/escape")),
    "udp": attacks.outcome(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()),
    "write_workspace": attacks.outcome(
        lambda: open(os.path.join(workspace, "w.txt"), "w").write("ok")  # noqa: SIM115
    ),
    "etc": {name: os.path.exists(f"/etc/{name}") for name in ("shadow", "passwd", "ssh")},
}
with open(os.path.join(workspace, "probe.json"), "w") as f:
    json.dump(report, f)
_wire.reply(run["id"], _wire.run_result(summary="probed"))
_wire.serve_until_exit()
