"""Sends the parent an unknown method, a model/complete with params that do not fit, and an
unknown notification, then answers the run with the error codes it got back."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
_wire.request(101, "files/delete", {"path": "/"})
_wire.request(102, "model/complete", {"runId": 7, "messages": "not a list"})
_wire.notify("child/gossip", {"x": 1})
codes = {}
while len(codes) < 2:
    msg = _wire.recv()
    if msg is None:
        _wire.leave()
    if msg.get("id") in (101, 102) and "error" in msg:
        codes[str(msg["id"])] = msg["error"]["code"]
_wire.reply(run["id"], _wire.run_result(summary=f"{codes['101']} {codes['102']}"))
_wire.serve_until_exit()
