"""UNIX sockets from inside a sandbox, as one stdlib-only script.

    python sockets_probe.py work [NAME...]   the ordinary work that needs local sockets (all
                                             of `WORK`, or those named): a multiprocessing
                                             Manager, a ProcessPoolExecutor with the
                                             forkserver context, a socket server and client in
                                             a private temp dir and in the workspace; prints
                                             {name: outcome} as JSON
    python sockets_probe.py serve DIR NAME   bind /tmp/held.sock, DIR/held.sock and the
                                             abstract socket NAME, write DIR/ready (our pid),
                                             serve until DIR/stop appears (30 s at most)
    python sockets_probe.py probe FILE       connect to each address FILE names
                                             ({name: address}); prints {name: outcome}

An outcome is `ok: ...` or `refused: ERRNO`.
"""

from __future__ import annotations

import concurrent.futures
import errno
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable


def outcome(fn: Callable[[], object]) -> str:
    try:
        got = fn()
    except OSError as exc:
        return f"refused: {errno.errorcode.get(exc.errno or 0, str(exc))}"
    except Exception as exc:  # what multiprocessing wraps a refused connect in
        return f"failed: {type(exc).__name__}: {exc}"[:300]
    return f"ok: {got!r}"[:300]


def manager() -> object:
    with multiprocessing.Manager() as m:
        shared = m.dict()
        shared["x"] = 41
        shared["x"] += 1
        return dict(shared)


def forkserver_pool() -> object:
    ctx = multiprocessing.get_context("forkserver")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        return list(pool.map(abs, [-1, -2, -3]))


def echo_through(path: str) -> object:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
        server.listen()
        server.settimeout(10)
        said, told = os.pipe()
        pid = os.fork()
        if pid == 0:  # the client is another process of the run; it says how connect went
            err = 0
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                    c.connect(path)
                    c.sendall(b"ping")
            except OSError as exc:
                err = exc.errno or 1
            finally:
                os.write(told, err.to_bytes(2, "little"))
                os._exit(0)
        os.close(told)
        err = int.from_bytes(os.read(said, 2), "little")
        os.close(said)
        os.waitpid(pid, 0)
        if err:
            raise OSError(err, os.strerror(err))
        conn, _ = server.accept()
        with conn:
            return conn.recv(4)
    finally:
        server.close()
        os.unlink(path)


WORK: dict[str, Callable[[], object]] = {
    "manager": manager,
    "forkserver_pool": forkserver_pool,
    "socket_in_tmp": lambda: echo_through(os.path.join(tempfile.mkdtemp(), "s")),
    "socket_in_workspace": lambda: echo_through(os.path.abspath("here.sock")),
}


def work(names: list[str] | None = None) -> dict[str, str]:
    return {name: outcome(WORK[name]) for name in names or WORK}


def serve(where: str, name: str) -> None:
    socks = []
    for address in ("/tmp/held.sock", os.path.join(where, "held.sock"), "\0" + name):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(address)
        if not address.startswith("\0"):
            os.chmod(address, 0o777)
        s.listen()
        s.setblocking(False)
        socks.append(s)
    with open(os.path.join(where, "ready"), "w") as f:
        f.write(str(os.getpid()))
    heard = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not os.path.exists(os.path.join(where, "stop")):
        for s in socks:
            try:
                conn, _ = s.accept()
            except BlockingIOError:
                continue
            conn.close()
            heard.append(s.getsockname())
        time.sleep(0.05)
    with open(os.path.join(where, "heard.json"), "w") as f:
        json.dump([str(h) for h in heard], f)


def connect(address: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect(address)
        s.sendall(b"leak")


def probe(path: str) -> dict[str, str]:
    with open(path) as f:
        targets = json.load(f)
    return {name: outcome(lambda a=address: connect(a)) for name, address in targets.items()}


if __name__ == "__main__":
    if sys.argv[1] == "work":
        print(json.dumps(work(sys.argv[2:])))
    elif sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    else:
        print(json.dumps(probe(sys.argv[2])))
