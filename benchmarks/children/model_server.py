"""A loopback model server for the gateway benchmark (stdlib only): `model_server.py`.

Listens on 127.0.0.1 on a free port, prints the port, and answers every `POST` on a kept-alive
connection (one thread each) with the same Anthropic Messages reply: one text block, end of
turn, one token each way. The request's body is read and not looked at. Runs until its stdin
closes.
"""

import socket
import sys
import threading

REPLY = (
    b'{"id": "msg_1", "type": "message", "role": "assistant", "model": "m", '
    b'"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", '
    b'"usage": {"input_tokens": 1, "output_tokens": 1}}'
)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(
    REPLY
)


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
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buf) < length:
                got = conn.recv(65536)
                if not got:
                    return
                buf += got
            buf = buf[length:]
            conn.sendall(HEAD + REPLY)


def main() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    sys.stdin.read()


if __name__ == "__main__":
    main()
