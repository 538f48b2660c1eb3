"""Many children at once, in a process of its own so its peak RSS is the supervisor's alone.

`python -m benchmarks.swarm --children 32` starts that many runs concurrently through one
`Supervisor` (the real tether child, a one-turn scripted model that calls `complete`), waits
for every result and leaves the supervisor, then prints one JSON object: `{"seconds", "ok",
"failures", "rss_before_kib", "rss_peak_kib"}`. The time runs from just before the first
`start()` to just after the `async with Supervisor()` block is left (every child spawned, run,
disposed and reaped). Memory is read from /proc/self/status: VmRSS before the first start,
VmHWM (the high-water mark of this process image, reset by exec) at the end; `ru_maxrss` would
not do, because it survives exec and so starts at the RSS of whoever forked us.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import anyio

from tether.parent.models.scripted import ScriptedModel
from tether.parent.supervisor import Supervisor

ONE_TURN = (
    b'[{"text": "done", "toolCalls": [{"name": "complete",'
    b' "arguments": {"summary": "ok", "paths": []}}]}]'
)


async def swarm(children: int, workspace: str) -> dict[str, object]:
    model = ScriptedModel.from_json(ONE_TURN)
    rss_before = _status_kib("VmRSS")
    t0 = time.perf_counter_ns()
    async with Supervisor() as sup:
        handles = [
            await sup.start("bench", model=model, workspace=workspace) for _ in range(children)
        ]
        results = [await h.result() for h in handles]
    t1 = time.perf_counter_ns()
    return {
        "seconds": (t1 - t0) / 1e9,
        "ok": sum(r.success for r in results),
        "failures": sorted({r.message for r in results if not r.success})[:3],
        "rss_before_kib": rss_before,
        "rss_peak_kib": _status_kib("VmHWM"),
    }


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--children", type=int, default=32)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as ws:
        out = anyio.run(swarm, args.children, ws, backend="asyncio")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
