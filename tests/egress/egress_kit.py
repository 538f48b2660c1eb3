"""What the egress tests share: a test CA standing in for the public ones, loopback HTTP and
HTTPS servers that play the allowed and denied hosts (each records what it was sent), a
raw proxy client that says exactly what it sent and what came back, a package index and a
git smart-HTTP server for `pip install` and `git clone`.

Every server listens on 127.0.0.1 only; names reach them through the proxy's test resolver
(`NameTable`), never through DNS. Nothing is sent to any other address.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import io
import ipaddress
import os
import socket
import ssl
import subprocess
import threading
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio

MiB = 1024 * 1024


class TestCA:
    """A CA of the test's own, with a server certificate for the names it is asked for."""

    __test__ = False

    def __init__(self, names: Sequence[str]) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tether test CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        alts: list[Any] = []
        for n in names:
            try:
                alts.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                alts.append(x509.DNSName(n))
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(name)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(alts), critical=False)
            .sign(key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        self.cert_pem = ca.public_bytes(pem)
        self.leaf_pem = leaf.public_bytes(pem) + leaf_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def client_context(self) -> ssl.SSLContext:
        """Verifies servers against this CA only (what the proxy's upstream trust is in
        tests)."""
        ctx = ssl.create_default_context(cadata=self.cert_pem.decode())
        return ctx

    def server_context(self, tmp: Path) -> ssl.SSLContext:
        path = tmp / f"leaf-{os.urandom(4).hex()}.pem"
        path.write_bytes(self.leaf_pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(path)
        return ctx

    def write(self, path: Path) -> Path:
        path.write_bytes(self.cert_pem)
        return path


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Site:
    """A loopback HTTP(S) server: `GET /hello` says who it is, `GET /bytes/N` sends N bytes,
    `GET /echo` sends back the request's headers, `POST /upload` counts the body; everything
    it was sent is kept in `seen`."""

    name: str
    server: ThreadingHTTPServer | None = None
    seen: list[Seen] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    """Extra paths served as they are (a package index's pages and wheel)."""

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self, body: bytes = b"") -> None:
            site.seen.append(
                Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )

        def _send(self, status: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            self._record()
            path = self.path.split("?", 1)[0]
            if path in site.files:
                kind = "text/html" if path.endswith("/") else "application/octet-stream"
                self._send(200, site.files[path], kind)
            elif path == "/hello":
                self._send(200, f"hello from {site.name}\n".encode())
            elif path.startswith("/bytes/"):
                n = int(path.rsplit("/", 1)[1])
                self.send_response(200)
                self.send_header("content-length", str(n))
                self.end_headers()
                block = b"x" * min(n, MiB)
                left = n
                while left > 0:
                    piece = block[: min(left, len(block))]
                    self.wfile.write(piece)
                    left -= len(piece)
            elif path == "/echo":
                lines = "".join(f"{k}: {v}\n" for k, v in self.headers.items())
                self._send(200, lines.encode())
            else:
                self._send(404, b"not here\n")

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            self._record(body)
            self._send(200, f"got {len(body)} bytes\n".encode())

    return Handler


@contextlib.contextmanager
def site(name: str, tls: ssl.SSLContext | None = None) -> Iterator[Site]:
    """A `Site` on 127.0.0.1 (HTTPS with `tls`), stopped at the end."""
    got = Site(name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(got))
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    got.server = server
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# --- a raw client -----------------------------------------------------------------------------


def raw(port: int, data: bytes, *, read_until_close: bool = True, seconds: float = 10) -> bytes:
    """Send `data` to the proxy on 127.0.0.1:`port` and read what comes back until it closes
    (or `seconds` pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                got = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not got:
                break
            out += got
            if not read_until_close and b"\r\n\r\n" in out:
                break
    return out


def through_connect(
    port: int,
    host: str,
    dest_port: int,
    *,
    ctx: ssl.SSLContext,
    sni: str | None = None,
    request: bytes | None = None,
    seconds: float = 10,
) -> tuple[bytes, bytes]:
    """CONNECT through the proxy, then TLS (with `sni`, default `host`) and one request; the
    proxy's answer to the CONNECT and the response (or the error, as bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as s:
        s.sendall(
            f"CONNECT {host}:{dest_port} HTTP/1.1\r\nHost: {host}:{dest_port}\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            got = s.recv(4096)
            if not got:
                return head, b""
            head += got
        if not head.startswith(b"HTTP/1.1 200"):
            return head, b""
        try:
            with ctx.wrap_socket(s, server_hostname=sni or host) as t:
                t.sendall(
                    request
                    or f"GET /hello HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
                )
                out = b""
                while True:
                    got = t.recv(65536)
                    if not got:
                        break
                    out += got
                return head, out
        except (ssl.SSLError, OSError) as exc:
            return head, f"error: {exc}".encode()


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking client off the event loop the proxy serves on."""
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))


# --- a package index --------------------------------------------------------------------------


def wheel(name: str = "tinypkg", version: str = "1.0") -> tuple[str, bytes]:
    """A minimal pure-Python wheel: (file name, bytes)."""
    files = {
        f"{name}/__init__.py": f"VALUE = 'from the local index {version}'\n".encode(),
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{name}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tether-test\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record_name = f"{name}-{version}.dist-info/RECORD"
    lines = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
    lines.append(f"{record_name},,")
    files[record_name] = ("\n".join(lines) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()


def index_files(name: str = "tinypkg") -> dict[str, bytes]:
    """The pages and the wheel of a PEP 503 simple index holding one package."""
    filename, data = wheel(name)
    digest = hashlib.sha256(data).hexdigest()
    page = f'<html><body><a href="/files/{filename}#sha256={digest}">{filename}</a></body></html>'
    return {
        "/simple/": f'<html><body><a href="/simple/{name}/">{name}</a></body></html>'.encode(),
        f"/simple/{name}/": page.encode(),
        f"/files/{filename}": data,
    }


# --- a git smart-HTTP server ------------------------------------------------------------------


def bare_repository(root: Path) -> Path:
    """A bare repository `project.git` under `root` with one commit (README)."""
    work = root / "work"
    work.mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root)}
    git = [
        "git",
        "-c",
        "user.name=T",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "init.defaultBranch=main",
    ]
    subprocess.run([*git, "init", "-q", str(work)], check=True, env=env)
    (work / "README").write_text("cloned through the proxy\n")
    subprocess.run([*git, "-C", str(work), "add", "README"], check=True, env=env)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "first"], check=True, env=env)
    bare = root / "project.git"
    subprocess.run([*git, "clone", "-q", "--bare", str(work), str(bare)], check=True, env=env)
    subprocess.run(["git", "-C", str(bare), "config", "http.receivepack", "false"], check=True)
    return bare


def git_handler(root: Path) -> type[BaseHTTPRequestHandler]:
    """`git http-backend` as a CGI under a plain handler (smart HTTP: upload-pack only)."""

    class Git(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _cgi(self, body: bytes) -> None:
            path, _, query = self.path.partition("?")
            env = {
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("content-type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": "127.0.0.1",
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            }
            if self.headers.get("git-protocol"):
                env["GIT_PROTOCOL"] = self.headers["git-protocol"]
            got = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=30
            )
            head, _, out = got.stdout.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.split(b"\r\n"):
                key, _, value = line.decode().partition(":")
                if key.lower() == "status":
                    status = int(value.strip().split()[0])
                elif key:
                    headers.append((key, value.strip()))
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self) -> None:
            self._cgi(b"")

        def do_POST(self) -> None:
            body = b""
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        break
                    body += self.rfile.read(size)
                    self.rfile.readline()
            else:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
            self._cgi(body)

    return Git


@contextlib.contextmanager
def git_server(root: Path) -> Iterator[int]:
    """A smart-HTTP git server for the repositories under `root` on 127.0.0.1; its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), git_handler(root))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
