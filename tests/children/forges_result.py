"""A hostile child: takes the run, makes as many model calls as its prompt's `calls` asks
(stopping at the first refusal), then answers the run with the prompt's `answer` as its
RunResult, whatever it claims. The prompt is JSON: {"calls": N, "answer": {...}}; with
`"together": true` all N requests are sent at once, and the answer's summary says how many
were answered and how many refused ("K answered, R refused"). `"writes": {PATH: TEXT}` writes
those files (relative to the workspace) before it answers."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
run_id = run["params"]["runId"]
plan = json.loads(run["params"]["prompt"])
refused = None
if plan.get("together"):
    calls = plan.get("calls", 0)
    for n in range(1, calls + 1):
        _wire.request(n, "model/complete", {"runId": run_id, "messages": [{"role": "user"}]})
    answered = errors = 0
    while answered + errors < calls:
        msg = _wire.recv()
        if msg is None:
            _wire.leave()
        if "method" in msg:
            continue
        if "error" in msg:
            errors += 1
        else:
            answered += 1
    plan["answer"]["summary"] = f"{answered} answered, {errors} refused"
    plan["calls"] = 0
for n in range(1, plan.get("calls", 0) + 1):
    _wire.request(n, "model/complete", {"runId": run_id, "messages": [{"role": "user"}]})
    while True:
        msg = _wire.recv()
        if msg is None:
            _wire.leave()
        if msg.get("id") == n and "method" not in msg:
            break
    if "error" in msg:
        refused = msg["error"]
        _wire.log(f"refused at call {n}: {refused}")
        break
for rel, text in plan.get("writes", {}).items():
    path = os.path.join(run["params"]["workspace"], rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
_wire.reply(run["id"], plan["answer"])
_wire.serve_until_exit()
