"""Answers `initialize` only after DELAY seconds (argv[1]), then behaves: answers `shutdown`,
leaves on `exit` or EOF. Its late answer arrives after the parent gave up on it."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

msg = _wire.recv()
if msg is None:
    _wire.leave()
time.sleep(float(sys.argv[1]))
_wire.reply(
    msg["id"],
    {
        "protocolVersion": 1,
        "serverInfo": {"name": "late", "version": "0"},
        "pid": os.getpid(),
        "capabilities": {},
        "maxMessageBytes": 33554432,
    },
)
_wire.serve_until_exit()
