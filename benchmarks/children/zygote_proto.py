"""A prototype zygote, for measuring only (not used by tether): import the child runtime once,
then fork a child per request.

Protocol on the unix socket whose fd is argv[1]: the parent sends one byte with three fds
(SCM_RIGHTS: the child's stdin, stdout, stderr); the zygote forks, answers the child's pid as a
line, and
reaps its children as they exit. The forked child starts a session of its own, moves the fds
to 0/1/2 and runs `tether.child`'s server exactly as `python -m tether.child` does after its
imports. What a real zygote would also need is listed in benchmarks/notes.md (zygote).
"""

import functools
import os
import signal
import socket
import sys

import anyio
import anyio._backends._asyncio  # anyio.run would import it in every fork

# Everything the child runtime imports, loaded once here (the wire claim in __main__ is harmless:
# the zygote's fds 0/1 are /dev/null).
import tether.child.__main__  # noqa: F401
from tether.child import fdguard, loop, runs, server  # noqa: F401


def child(fds: list[int]) -> None:
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    wire = fdguard.claim_wire()
    code = anyio.run(functools.partial(server.serve, wire), backend="asyncio")
    os._exit(code)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 16, 3)
        if not msg:
            return
        pid = os.fork()
        if pid == 0:
            sock.close()
            child(fds)
        for fd in fds:
            os.close(fd)
        sock.sendall(f"{pid}\n".encode())
        while True:
            try:
                got, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if got == 0:
                break


if __name__ == "__main__":
    sys.exit(main())
