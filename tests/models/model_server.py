"""A real HTTP server on 127.0.0.1 (ephemeral port, stdlib, in a thread) that answers model API
requests from a script of replies and records every request it received."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    body: Any = None
    """JSON body; ignored when `raw` is set."""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering (cut short when the server closes)."""
    gate: threading.Event | None = None
    """If set, the answer waits until the test sets this event."""
    raw: bytes | None = None


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    body: Any
    peer: int = 0
    """The client's port: one per connection."""


class ModelServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                data = self.rfile.read(length)
                try:
                    body = json.loads(data)
                except ValueError:
                    body = data
                with owner._lock:
                    owner.received.append(
                        Received(
                            "POST",
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            body,
                            int(self.client_address[1]),
                        )
                    )
                    reply = owner.replies.popleft() if owner.replies else None
                if reply is None:
                    reply = Reply(status=418, body={"error": {"message": "no reply scripted"}})
                if reply.gate is not None:
                    while not reply.gate.wait(0.05) and not owner._closing.is_set():
                        pass
                if reply.delay and owner._closing.wait(reply.delay):
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (a timeout test)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
