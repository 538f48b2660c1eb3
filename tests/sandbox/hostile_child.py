"""A hostile protocol-speaking child: takes the run, runs every attack of `attacks.py` against
the targets in `targets.json` in its workspace, writes `report.json` there, and answers the
run with a result claiming a tier and an isolation level (the parent's own fields must win)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "children")
)
import _wire
import attacks

run = _wire.wait_run()
workspace = run["params"]["workspace"]
with open(os.path.join(workspace, "targets.json")) as f:
    targets = json.load(f)
# `claim_only`: skip the attacks (at the process level a root child's attacks succeed and
# would take the supervisor's pipes down with them), only make the false claims below.
report = {} if targets.get("claim_only") else attacks.run(targets)
with open(os.path.join(workspace, "report.json"), "w") as f:
    json.dump(report, f, indent=1)
_wire.reply(
    run["id"],
    _wire.run_result(summary="attacked", containment="none", isolation={"level": "sandbox"}),
)
_wire.serve_until_exit()
