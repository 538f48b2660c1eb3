"""What the nesting-depth check costs next to decoding the same line.

    .venv/bin/python -m benchmarks.depth          # or .nox/tests-3-13/bin/python -m ...

For each line, best of several rounds: `exceeds_depth` alone; msgspec's decode of the envelope
(params stay raw: what `decode_line` did before the check); that plus `decode_params` (what a
receiver does with a request). The ratio is the check over that decode.
"""

from __future__ import annotations

import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from tether.protocol import decode_params, encode_request, exceeds_depth
from tether.protocol.codec import Envelope, Notification, Request, classify

_envelope = msgspec.json.Decoder(Envelope)


def _decode_unchecked(line: bytes) -> Request | Notification:
    """`decode_line` without the depth check: the baseline."""
    msg = classify(_envelope.decode(line), line)
    assert isinstance(msg, Request | Notification), msg
    return msg


MIB = 1 << 20
SOURCE = (Path(__file__).resolve().parents[1] / "parent" / "supervisor.py").read_text()


def _transcript(size: int, content: str) -> bytes:
    """A model/complete request whose transcript holds tool results of `content`."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an explorer."}]
    tools = [
        {
            "name": name,
            "description": f"does {name}",
            "inputSchema": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}},
                "required": ["path"],
            },
        }
        for name in ("read_file", "grep", "glob", "list_dir", "write_file", "bash", "complete")
    ]
    line = b""
    i = 0
    while len(line) < size:
        call = {"id": f"c{i}", "name": "read_file", "arguments": {"path": f"src/m{i}.py"}}
        messages.append({"role": "assistant", "toolCalls": [call]})
        messages.append({"role": "tool", "toolCallId": f"c{i}", "content": content})
        params = {"runId": "r", "messages": messages, "tools": tools}
        line = encode_request(3, "model/complete", params).rstrip(b"\n")
        i += 1
    return line


def _structured(size: int) -> bytes:
    """An agent/event whose data is a long list of small nested records."""
    items: list[Any] = []
    line = b""
    while len(line) < size:
        for _ in range(500):
            n = len(items)
            items.append({"path": f"src/f{n}.py", "line": n, "tags": ["a", "b["], "m": {"k": [1]}})
        params = {"runId": "r", "seq": 1, "kind": "tool_result", "data": {"items": items}}
        line = encode_request(4, "agent/event", params).rstrip(b"\n")
    return line


def _best(fn: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=15)) / number


def main() -> None:
    lines = {
        "typical model/complete, 4 KB": _transcript(4_000, "src/a.py:3: # TODO fix [x] {y}\n" * 4),
        "1 MiB transcript of source files": _transcript(MIB, SOURCE),
        "1 MiB of small records (event data)": _structured(MIB),
        "1 MiB of 126-deep chains (hostile)": b'{"jsonrpc":"2.0","method":"x","params":['
        + b",".join([b"[" * 125 + b"]" * 125] * (MIB // 252))
        + b"]}",
    }
    print(f"Python {sys.version.split()[0]}, msgspec {msgspec.__version__}")
    print(f"{'line':38} {'bytes':>9} {'check':>9} {'envelope':>9} {'+params':>9}")
    for name, line in lines.items():
        number = 2_000 if len(line) < 100_000 else 5
        check = _best(lambda line=line: exceeds_depth(line), number)
        envelope = _best(lambda line=line: _decode_unchecked(line), number)
        msg = _decode_unchecked(line)
        if msg.method == "x":  # the hostile line: nothing would decode its params
            full, against = envelope, "the envelope decode"
        else:
            full = _best(
                lambda line=line, m=msg: decode_params(m.method, _decode_unchecked(line).params),
                number,
            )
            against = "envelope + params decode"
        print(
            f"{name:38} {len(line):>9} {check * 1e6:>7.0f}us {envelope * 1e6:>7.0f}us "
            f"{full * 1e6:>7.0f}us   check = {check / full:.0%} of {against}"
        )


if __name__ == "__main__":
    main()
