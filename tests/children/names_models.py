"""A hostile child: takes the run, then asks the parent for model turns naming the model strings
listed (one per line) in its prompt, and answers the run with what each request got back, one
line each: `ok <text>` or `error <code> <message>`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
run_id = run["params"]["runId"]
outcomes = []
for n, name in enumerate(run["params"]["prompt"].splitlines(), start=1):
    params = {"runId": run_id, "messages": [{"role": "user", "content": "hi"}]}
    if name != "-":
        params["model"] = name
    _wire.request(n, "model/complete", params)
    while True:
        msg = _wire.recv()
        if msg is None:
            _wire.leave()
        if msg.get("id") == n and "method" not in msg:
            break
    if "error" in msg:
        outcomes.append(f"error {msg['error']['code']} {msg['error']['message']}")
    else:
        outcomes.append(f"ok {msg['result']['message']['content']}")
_wire.reply(run["id"], _wire.run_result(summary="\n".join(outcomes)))
_wire.serve_until_exit()
