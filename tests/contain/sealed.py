"""Run as root: `python -I sealed.py WHAT DIR`, in a mount namespace of its own.

- `WHAT=seal`: DIR holds `listen.sock` (world-writable, listening, bound by the test); seal
  this process's view (`mounts.private_namespace(seal=True)`, a private /tmp only), then,
  still as root, try to connect to it, read a file beside it, list /dev, and bind a socket of
  our own in the private /tmp and connect to that; print {what: outcome} as JSON.
- `WHAT=unsealable`: mount a ramfs (which cannot be idmapped, and can hold sockets) on DIR
  first; sealing must refuse: print {"error": message}.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys

from tether.contain import mounts


def attempt(fn: object) -> str:
    try:
        got = fn()  # type: ignore[operator]
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    return f"ok: {got!r}" if got is not None else "ok"


def connect(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)


def own_socket() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind("/tmp/own.sock")
        s.listen()
        connect("/tmp/own.sock")


def main(what: str, where: str) -> dict[str, str]:
    if what == "unsealable":
        mounts.unshare(mounts.CLONE_NEWNS)
        mounts.mount("none", "/", None, mounts.MS_REC | mounts.MS_PRIVATE)
        mounts.mount("ramfs", where, "ramfs", 0)
    plan = mounts.layout([], None, lambda d: True, private_tmp=("/tmp",))
    try:
        mounts.private_namespace(plan, idmap=None, seal=True, devices=["/dev/null"])
    except mounts.SealError as exc:
        return {"error": str(exc)}
    return {
        "connect_outside": attempt(lambda: connect(os.path.join(where, "listen.sock"))),
        "read_beside": attempt(lambda: open(os.path.join(where, "file.txt")).read()),
        "owner_seen": str(os.stat(os.path.join(where, "file.txt")).st_uid),
        "dev": attempt(lambda: sorted(os.listdir("/dev"))),
        "dev_null": attempt(lambda: open("/dev/null", "w").write("x")),
        "own_socket": attempt(own_socket),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
