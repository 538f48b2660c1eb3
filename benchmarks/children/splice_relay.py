"""A bare TCP relay for the egress benchmark's context figure (stdlib only):
`splice_relay.py PORT`. Listens on 127.0.0.1 (prints its port) and joins each connection to
127.0.0.1:PORT, moving bytes both ways with blocking `splice(2)` through a pipe, one thread
per direction: no policy, no HTTP, no event loop. What any relay in a process of its own
costs a download on this machine. Runs until its stdin closes."""

import os
import socket
import sys
import threading

TARGET = int(sys.argv[1])
PIPE = 1 << 20


def pump(src: socket.socket, dst: socket.socket) -> None:
    r, w = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(w, 1031, PIPE)  # F_SETPIPE_SZ
    except OSError:
        pass
    try:
        while True:
            n = os.splice(src.fileno(), w, PIPE)
            if n == 0:
                dst.shutdown(socket.SHUT_WR)
                return
            while n:
                n -= os.splice(r, dst.fileno(), n)
    except OSError:
        return
    finally:
        os.close(r)
        os.close(w)


def join(conn: socket.socket) -> None:
    up = socket.create_connection(("127.0.0.1", TARGET))
    for a, b in ((conn, up), (up, conn)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()


def main() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            join(conn)

    threading.Thread(target=accept, daemon=True).start()
    sys.stdin.read()


main()
