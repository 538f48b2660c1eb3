"""A protocol-speaking child that does the work of `sockets_probe.py work` (a Manager, a
forkserver pool, its own socket server) when it takes a run, writes what happened to
`work.json` in its workspace, and answers."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "children")
)
import _wire
import sockets_probe

if __name__ == "__main__":  # the forkserver imports this module again
    run = _wire.wait_run()
    os.chdir(run["params"]["workspace"])
    with open("work.json", "w") as f:
        json.dump(sockets_probe.work(), f)
    _wire.reply(run["id"], _wire.run_result(summary="worked"))
    _wire.serve_until_exit()
