"""The egress benchmark's client (stdlib only): `http_client.py MODE PORT PROXY N`.

MODE `small`: N GETs of `/small` on one kept-alive connection, printing each request's time
(ns, from the request's first byte sent to the response's last byte read) as a JSON list.
MODE `big` / `tunnel`: one GET of `/big`, read with `recv_into` into one buffer, printing the
time (ns) from the request sent to the last byte read. PROXY 0: straight to the server on
127.0.0.1:PORT; else through the proxy on 127.0.0.1:PROXY, in absolute form (`small`,
`big`) or through a `CONNECT` tunnel (`tunnel`, set up before the clock starts).
"""

import json
import socket
import sys
import time

mode, port, proxy, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
target = f"127.0.0.1:{port}"


def head(conn: socket.socket, buf: bytearray) -> tuple[int, bytes]:
    """Read up to the end of a response head; (content-length, bytes of the body read)."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            raise SystemExit("closed")
        data += got
    top, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in top.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value)
    return length, rest


def get(conn: socket.socket, path: str, buf: bytearray) -> None:
    line = f"http://{target}{path}" if proxy and mode != "tunnel" else path
    conn.sendall(f"GET {line} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    length, got = head(conn, buf)
    left = length - len(got)
    view = memoryview(buf)
    while left > 0:
        read = conn.recv_into(view[: min(left, len(buf))])
        if not read:
            raise SystemExit("closed mid-body")
        left -= read


conn = socket.create_connection(("127.0.0.1", proxy or port))
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if mode == "tunnel":
    conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(4096)
    assert data.startswith(b"HTTP/1.1 200"), data
buf = bytearray(1 << 20)
if mode == "small":
    get(conn, "/small", buf)  # the connection (and the proxy's upstream) is warm
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        get(conn, "/small", buf)
        times.append(time.perf_counter_ns() - t0)
    print(json.dumps(times))
else:
    t0 = time.perf_counter_ns()
    get(conn, "/big", buf)
    print(time.perf_counter_ns() - t0)
conn.close()
