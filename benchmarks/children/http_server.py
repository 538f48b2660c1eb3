"""A minimal HTTP/1.1 server for the egress benchmark (stdlib only): `http_server.py SIZE`.

Listens on 127.0.0.1 on a free port, prints the port, and serves kept-alive connections, one
thread each: `GET /small` answers 32 bytes, `GET /big` SIZE bytes from one buffer (sent with
`sendall`, no copy per request). Requests are read in origin or absolute form alike (a proxy
relays origin form; the direct client sends it too). Runs until its stdin closes.
"""

import socket
import sys
import threading

SIZE = int(sys.argv[1])
BIG = memoryview(bytearray(b"x" * SIZE))
SMALL = b"0123456789abcdef0123456789abcdef"


def serve(conn: socket.socket) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                got = conn.recv(65536)
                if not got:
                    return
                buf += got
            head, _, buf = buf.partition(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            body = BIG if path.endswith(b"/big") else memoryview(SMALL)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
            conn.sendall(body)


def main() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    sys.stdin.read()


main()
