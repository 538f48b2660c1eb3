"""Floor: the same ping-pong peer as floor_echo_blocking.py, on asyncio streams."""

import asyncio
import json
import sys


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    writer.write(b"ready\n")
    await writer.drain()
    while True:
        line = await reader.readline()
        if not line:
            return
        msg = json.loads(line)
        writer.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}).encode() + b"\n")
        await writer.drain()


asyncio.run(main())
