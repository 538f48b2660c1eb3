"""Floor: a ping-pong peer with blocking os.read/os.write and the stdlib json module.

Announces itself with one line, then answers every `{"id": N, ...}` line with a
`{"jsonrpc": "2.0", "id": N, "result": {}}` line until stdin ends.
"""

import json
import os

os.write(1, b"ready\n")
buf = b""
while True:
    data = os.read(0, 65536)
    if not data:
        break
    buf += data
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        msg = json.loads(line)
        out = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}).encode() + b"\n"
        os.write(1, out)
