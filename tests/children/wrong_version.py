"""Answers `initialize` claiming a protocol version the parent does not speak, then behaves."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

msg = _wire.recv()
if msg is None:
    _wire.leave()
_wire.reply(
    msg["id"],
    {"protocolVersion": 99, "serverInfo": {"name": "x", "version": "0"}, "pid": os.getpid()},
)
_wire.serve_until_exit()
