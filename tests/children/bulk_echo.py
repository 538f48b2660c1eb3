"""Answers `initialize`, then every `x/bulk` request with a result whose `pad` is `n` bytes of a
pattern that names its position (`params.n`, `params.tag`) and echoes the size and a digest of
the `pad` it was sent; `ping` with `{}`. Stdlib only (`_wire`)."""

from __future__ import annotations

import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _wire


def pattern(tag: str, n: int) -> str:
    unit = f"{tag}:" + "0123456789abcdef" * 4
    return (unit * (n // len(unit) + 1))[:n]


while (msg := _wire.recv()) is not None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        _wire.reply(rid, {"protocolVersion": 1, "serverInfo": {"name": "bulk"}, "pid": os.getpid()})
    elif method == "x/bulk":
        sent = params.get("pad", "")
        _wire.reply(
            rid,
            {
                "pad": pattern(params["tag"], params["n"]),
                "got": len(sent),
                "sha": hashlib.sha256(sent.encode()).hexdigest(),
            },
        )
    elif method == "ping":
        _wire.reply(rid, {})
    elif method == "exit":
        break
