"""A benchmark child that speaks tether's wire protocol with blocking I/O and tether.protocol.

Run as `python -I proto.py MODE [N]`. It answers `initialize`, `ping` (`{}`), `shutdown`
(`null`) and `exit` like any child, exits on EOF, and does what MODE says when it gets
`agent/run`:

  serve        answer the run at once (a successful, empty RunResult)
  model N      send N `model/complete` requests one after another, timing each with
               perf_counter_ns from just before its line is written to just after its reply is
               decoded; the run's summary is the JSON list of those times (ns)
  flood N      write N `agent/event` notifications (encoded up front, written in big blocks),
               then answer the run; the summary is the encode time (ns)
  bigpong N    answer every `ping` with a result carrying an N-byte `pad` member
  crash        write `crash-at <time.monotonic_ns()>` to stderr, then SIGSEGV itself
  stubborn     ignore SIGTERM, never answer anything after `initialize`, survive stdin EOF
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time

from tether.protocol import (
    Decoder,
    Notification,
    Request,
    Response,
    decode_params,
    decode_result,
    encode_notification,
    encode_request,
    encode_response,
)
from tether.protocol.messages import (
    AgentEventParams,
    ChatMessage,
    Empty,
    InitializeResult,
    ModelCompleteParams,
    PeerInfo,
    RunResult,
)

MODE = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 0
IN, OUT = 0, 1


class Wire:
    def __init__(self) -> None:
        self.decoder = Decoder()
        self.queue: collections.deque[object] = collections.deque()

    def next(self) -> object | None:
        while not self.queue:
            data = os.read(IN, 1 << 20)
            if not data:
                return None
            self.queue.extend(self.decoder.feed(data))
        return self.queue.popleft()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(OUT, view) :]


def model_loop(wire: Wire, run_id: str, n: int) -> list[int]:
    params = ModelCompleteParams(
        run_id=run_id, messages=[ChatMessage(role="user", content="say hi")]
    )
    times = []
    for rid in range(1, n + 1):
        t0 = time.perf_counter_ns()
        wire.send(encode_request(rid, "model/complete", params))
        reply = wire.next()
        if not isinstance(reply, Response) or reply.id != rid:
            raise SystemExit(f"unexpected reply {reply!r}")
        decode_result("model/complete", reply.result)
        times.append(time.perf_counter_ns() - t0)
    return times


def flood(wire: Wire, run_id: str, n: int) -> int:
    t0 = time.perf_counter_ns()
    lines = [
        encode_notification(
            "agent/event",
            AgentEventParams(run_id=run_id, seq=i, kind="text", data={"text": "tick"}),
        )
        for i in range(n)
    ]
    encode_ns = time.perf_counter_ns() - t0
    block = 1 << 16
    step = max(1, block // max(1, len(lines[0])))
    for i in range(0, n, step):
        wire.send(b"".join(lines[i : i + step]))
    return encode_ns


def main() -> None:
    if MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    wire = Wire()
    pad = "x" * N if MODE == "bigpong" else ""
    while True:
        msg = wire.next()
        if msg is None:
            break
        if isinstance(msg, Notification):
            if msg.method == "exit":
                os._exit(0)
            continue
        if not isinstance(msg, Request):
            continue
        if msg.method == "initialize":
            result: object = InitializeResult(
                protocol_version=1, server_info=PeerInfo(name="bench-proto"), pid=os.getpid()
            )
            wire.send(encode_response(msg.id, result))
            if MODE == "stubborn":
                break
        elif msg.method == "ping":
            wire.send(encode_response(msg.id, {"pad": pad} if pad else Empty()))
        elif msg.method == "shutdown":
            wire.send(encode_response(msg.id, None))
        elif msg.method == "agent/run":
            run_id = decode_params("agent/run", msg.params).run_id
            summary = ""
            if MODE == "model":
                summary = json.dumps(model_loop(wire, run_id, N))
            elif MODE == "flood":
                summary = str(flood(wire, run_id, N))
            elif MODE == "crash":
                os.write(2, f"crash-at {time.monotonic_ns()}\n".encode())
                os.kill(os.getpid(), signal.SIGSEGV)
            ok = RunResult(success=True, status="completed", summary=summary, run_id=run_id)
            wire.send(encode_response(msg.id, ok))
    if MODE == "stubborn":
        # Deaf to EOF and SIGTERM: only SIGKILL ends this.
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
