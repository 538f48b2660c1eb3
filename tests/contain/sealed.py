"""Run as root: `python -I sealed.py WHAT DIR`, in a mount namespace of its own.

- `WHAT=seal`: DIR holds `listen.sock` (world-writable, listening, bound by the test); seal
  this process's view (`mounts.private_namespace(seal=True)`, a private /tmp only), then,
  still as root, try to connect to it, read a file beside it, list /dev, and bind a socket of
  our own in the private /tmp and connect to that; print {what: outcome} as JSON.
- `WHAT=unsealable`: mount a ramfs (which cannot be idmapped, and can hold sockets) on DIR
  first; the view must say it is not sealed: print {"unsealed": why}.
- `WHAT=degraded`: the same ramfs on DIR, then a whole sandboxed child granted DIR (asking for
  local sockets), which tries to connect to a socket of its own: print what it got and what
  its environment tells it.
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


PROBE = """
import json, os, socket, tempfile
path = os.path.join(tempfile.mkdtemp(), "s")
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen()
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    client.connect(path)
    got = "ok"
except OSError as exc:
    got = os.strerror(exc.errno)
print(json.dumps({"connect_own": got, "told": os.environ.get("TETHER_LOCAL_SOCKETS", "")}))
"""


def degraded(where: str) -> dict[str, str]:
    """A whole sandboxed child (the trampoline, a plan granting `where`) whose grant lies on
    a ramfs: it runs, without `connect`, and is told why."""
    import subprocess

    from tether.contain import argv as config_word
    from tether.contain.inplace import TRAMPOLINE
    from tether.parent.process.isolation import plan_for

    mounts.unshare(mounts.CLONE_NEWNS)
    mounts.mount("none", "/", None, mounts.MS_REC | mounts.MS_PRIVATE)
    mounts.mount("ramfs", where, "ramfs", 0, "mode=755")
    command = [sys.executable, "-I", "-c", PROBE]
    setup = plan_for("sandbox", command=command, workspace=None, read_paths=[where])
    word = config_word.encode({"plan": setup.plan.to_json()})
    got = subprocess.run(
        [sys.executable, "-I", "-S", TRAMPOLINE, word, "--", *command],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", **setup.env},
        check=False,
    )
    if setup.cleanup is not None:
        setup.cleanup()
    out: dict[str, str] = json.loads(got.stdout or "{}") if got.returncode == 0 else {}
    return out or {"failed": got.stderr[-500:]}


def main(what: str, where: str) -> dict[str, str]:
    if what == "degraded":
        return degraded(where)
    if what == "unsealable":
        mounts.unshare(mounts.CLONE_NEWNS)
        mounts.mount("none", "/", None, mounts.MS_REC | mounts.MS_PRIVATE)
        mounts.mount("ramfs", where, "ramfs", 0)
    plan = mounts.layout([], None, lambda d: True, private_tmp=("/tmp",))
    done = mounts.private_namespace(plan, idmap=None, seal=True, devices=["/dev/null"])
    if done.unsealed:
        return {"unsealed": done.unsealed[0]}
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
