"""Network probes run inside a sandboxed child (standard library only): `python3 net_probes.py
PLAN.json OUT.json`, or imported by the protocol child (`net_child.py`).

PLAN is a list of `[name, kind, args]`; OUT maps each name to what happened: `ok: ...`,
`refused: ...` (the proxy answered 403, or the system refused) or `error: ...`. Kinds:

- `fetch` [url, cafile?]: urllib through the proxy the environment names;
- `post` [url, body]: the same, POST;
- `raw` [text]: send text to the proxy (`HTTPS_PROXY`'s address; `{proxy}` in it is that
  address) and say what came back;
- `tls` [host, port, sni, cafile, request]: CONNECT host:port through the proxy, then TLS
  naming `sni`, then the request; says the response (and keeps the bytes sent in `sent`);
- `dns` [name]: resolve a name here; `direct` [host, port]: TCP connect without the proxy
  (port 0: the proxy's port number);
  `udp` [host, port]: send a datagram; `bind` [port]: listen on a TCP port; `unix` []: make a
  UNIX socket;
- `seen` [path]: write to PATH everything this process can read that a credential could hide
  in: its environment, every /proc/PID/environ, cmdline and status it may open, and the files
  under HOME, TMPDIR, the workspace and the trust file's directory (the test searches it).
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


def _proxy() -> tuple[str, int]:
    url = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    return url.hostname or "127.0.0.1", url.port or 80


def fetch(url: str, cafile: str | None = None, body: bytes | None = None) -> str:
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    request = urllib.request.Request(url, data=body, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=20, context=ctx) as response:
            return f"ok: {response.status} {response.read().decode(errors='replace')}"
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        kind = "refused" if exc.code == 403 else "error"
        return f"{kind}: {exc.code} {text}"
    except (urllib.error.URLError, OSError) as exc:
        return f"error: {exc}"


def raw(data: str) -> str:
    host, port = _proxy()
    try:
        with socket.create_connection((host, port), timeout=20) as s:
            s.sendall(data.replace("{proxy}", f"{host}:{port}").encode())
            out = b""
            while True:
                got = s.recv(65536)
                if not got:
                    break
                out += got
    except OSError as exc:
        return f"error: {exc}"
    text = out.decode(errors="replace")
    statuses = [line for line in text.split("\r\n") if line.startswith("HTTP/1.1 ")]
    return ("refused: " if any(" 403 " in s for s in statuses) else "ok: ") + text


def tls(host: str, port: int, sni: str, cafile: str, request: str, sent: list[str]) -> str:
    try:
        s = socket.create_connection(_proxy(), timeout=20)
    except OSError as exc:
        return f"error: {exc}"
    with s:
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            got = s.recv(4096)
            if not got:
                break
            head += got
        if not head.startswith(b"HTTP/1.1 200"):
            return "refused: " + head.decode(errors="replace")
        ctx = ssl.create_default_context(cafile=cafile)
        try:
            with ctx.wrap_socket(s, server_hostname=sni) as t:
                t.sendall(request.encode())
                sent.append(request)
                out = b""
                while True:
                    got = t.recv(65536)
                    if not got:
                        break
                    out += got
        except ssl.SSLError as exc:
            return f"refused: {exc}"
        except OSError as exc:
            return f"error: {exc}"
        return "ok: " + out.decode(errors="replace")


def _refusal(exc: OSError) -> str:
    return f"refused: {type(exc).__name__}: {exc}"


def dns(name: str) -> str:
    try:
        return f"ok: {socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)[0][4]}"
    except OSError as exc:
        return _refusal(exc)


def direct(host: str, port: int) -> str:
    if port == 0:
        port = _proxy()[1]  # the proxy's port number, on another address
    try:
        with socket.create_connection((host, port), timeout=5):
            return "ok: connected"
    except OSError as exc:
        return _refusal(exc)


def udp(host: str, port: int) -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"probe", (host, port))
            return "ok: sent"
    except OSError as exc:
        return _refusal(exc)


def bind(port: int) -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))
            s.listen()
            return "ok: listening"
    except OSError as exc:
        return _refusal(exc)


def unix() -> str:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM):
            return "ok: made"
    except OSError as exc:
        return _refusal(exc)


def _read(path: str, limit: int = 1 << 20) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return b""


def seen(out: str) -> str:
    chunks: list[bytes] = [json.dumps(dict(os.environ)).encode()]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            for what in ("environ", "cmdline", "status"):
                chunks.append(_read(f"/proc/{pid}/{what}"))
    roots = [os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), os.getcwd()]
    trust = os.environ.get("SSL_CERT_FILE")
    if trust:
        roots.append(os.path.dirname(trust))
    files = 0
    for root in roots:
        for where, _, names in os.walk(root) if root else ():
            for name in names:
                path = os.path.join(where, name)
                if path != out and files < 2000:
                    files += 1
                    chunks.append(_read(path))
    with open(out, "wb") as f:
        f.write(b"\n".join(chunks))
    return f"ok: {files} files"


def run(plan: list[list[Any]]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    sent: list[str] = []
    for name, kind, args in plan:
        if kind == "fetch":
            report[name] = fetch(*args)
        elif kind == "post":
            report[name] = fetch(args[0], None, args[1].encode())
        elif kind == "raw":
            report[name] = raw(args[0])
        elif kind == "tls":
            report[name] = tls(*args, sent)
        elif kind == "dns":
            report[name] = dns(*args)
        elif kind == "direct":
            report[name] = direct(*args)
        elif kind == "udp":
            report[name] = udp(*args)
        elif kind == "bind":
            report[name] = bind(*args)
        elif kind == "unix":
            report[name] = unix()
        elif kind == "seen":
            report[name] = seen(*args)
        else:
            report[name] = f"error: unknown probe {kind}"
    report["sent"] = sent
    report["environ"] = dict(os.environ)
    return report


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        got = run(json.load(f))
    with open(sys.argv[2], "w") as f:
        json.dump(got, f, indent=1)
