"""A child that wants more than its limits: it tries to raise its rlimits and to move out of
its cgroup, starts as many processes as it can (up to 60), writes `greedy.json` in its
workspace, then allocates (and touches) up to 400 MiB, and answers the run if it survives."""

import json
import os
import resource
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "children")
)
import _wire
import attacks

run = _wire.wait_run()
workspace = run["params"]["workspace"]
report = {
    "raise_nproc": attacks.outcome(lambda: attacks.raise_limit("RLIMIT_NPROC")),
    "raise_data": attacks.outcome(lambda: attacks.raise_limit("RLIMIT_DATA")),
    "raise_as": attacks.outcome(lambda: attacks.raise_limit("RLIMIT_AS")),
    "leave_cgroup": attacks.outcome(attacks.leave_cgroup),
    "limits": {
        name: resource.getrlimit(getattr(resource, name))
        for name in ("RLIMIT_NPROC", "RLIMIT_DATA", "RLIMIT_AS")
    },
}
started = []
for _ in range(60):
    try:
        started.append(subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL))
    except OSError as exc:
        report["spawn_stopped"] = str(exc)
        break
report["spawned"] = len(started)
with open(os.path.join(workspace, "greedy.json"), "w") as f:
    json.dump(report, f)
for p in started:
    p.kill()
    p.wait()
chunks = []
try:
    for _ in range(40):
        chunk = bytearray(10 << 20)
        for i in range(0, len(chunk), 4096):
            chunk[i] = 1
        chunks.append(chunk)
    outcome = f"allocated {len(chunks) * 10} MiB"
except MemoryError:
    outcome = f"MemoryError after {len(chunks) * 10} MiB"
_wire.reply(run["id"], _wire.run_result(summary=outcome))
_wire.serve_until_exit()
