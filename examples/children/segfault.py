"""A child that completes the handshake, takes a run, and dies by SIGSEGV (for the demo)."""

import json
import os
import signal
import sys

for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        result = {
            "protocolVersion": 1,
            "serverInfo": {"name": "segfault", "version": "0"},
            "pid": os.getpid(),
            "capabilities": {},
            "maxMessageBytes": 33554432,
        }
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
        sys.stdout.flush()
    elif msg.get("method") == "agent/run":
        print("segfault child: about to crash", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
