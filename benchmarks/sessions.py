"""The session store's hot path, measured: what a supervisor pays per turn, per heartbeat and
per activation, under `synchronous=FULL` (the default) and `NORMAL`, and why a transcript is a
row per message rather than one blob.

    scripts/bench-sessions [--quick] [--dir DIR] [--samples N]

`--dir` picks where the databases go (default: a temporary directory under $TMPDIR): the
figures are the filesystem's as much as SQLite's, so run it where the state directory lives.
Each figure is the wall time of one awaited store call (thread hop included), from call to
return, in milliseconds: median, 90th percentile and max of `--samples` calls. Nothing is
asserted; `tests/sessions/test_bench_sessions_smoke.py` only checks that every figure is
printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec

from tether.parent.agents.sessions import Activation, SessionStore
from tether.parent.agents.sessions.db import Synchronous
from tether.protocol.messages import AgentDefinition, ChatMessage, ToolCall, Usage

TURN_BYTES = 2048
"""Content of each of a turn's two messages (an assistant reply with a tool call, its result)."""


@dataclass
class Figure:
    key: str
    what: str
    samples: list[float]

    def row(self) -> str:
        ms = sorted(s * 1000 for s in self.samples)
        p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
        return (
            f"| `{self.key}` | {self.what} | {len(ms)} | {statistics.median(ms):.3f} | "
            f"{p90:.3f} | {ms[-1]:.3f} |"
        )


def turn(k: int) -> list[ChatMessage]:
    call = ToolCall(id=f"c{k}", name="read_file", arguments={"path": f"src/{k}.py"})
    return [
        ChatMessage(role="assistant", content="a" * TURN_BYTES, tool_calls=[call]),
        ChatMessage(role="tool", content="r" * TURN_BYTES, tool_call_id=f"c{k}"),
    ]


async def timed(n: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    out = []
    for k in range(n):
        started = time.perf_counter()
        await call(k)
        out.append(time.perf_counter() - started)
    return out


async def activate(store: SessionStore, agent_id: str) -> Activation:
    activation = await store.acquire(agent_id)
    assert isinstance(activation, Activation)
    return activation


async def store_figures(root: Path, sync: Synchronous, n: int, grown: int) -> list[Figure]:
    figures = []
    async with SessionStore(root / f"store-{sync}", synchronous=sync) as store:
        agent = await store.create_agent(AgentDefinition(type="general"))
        activation = await activate(store, agent.id)
        usage = Usage(input_tokens=1000, output_tokens=100)
        figures.append(
            Figure(
                f"{sync}.append_turn",
                f"append one turn (2 messages of {TURN_BYTES // 1024} KiB each) + usage, "
                "transcript near empty",
                await timed(n, lambda k: activation.append(turn(k), usage)),
            )
        )
        # Grow the transcript, then the same append again: it must not cost more.
        for k in range(grown // 2):
            await activation.append(turn(k), usage)
        figures.append(
            Figure(
                f"{sync}.append_turn_long",
                f"the same, transcript at {grown + 2 * n} messages",
                await timed(n, lambda k: activation.append(turn(k), usage)),
            )
        )
        figures.append(
            Figure(
                f"{sync}.heartbeat",
                "refresh the lease (one UPDATE, fenced by the token)",
                await timed(n, lambda _: activation.heartbeat()),
            )
        )
        figures.append(
            Figure(
                f"{sync}.report",
                "store one report (200 chars)",
                await timed(n, lambda k: activation.report(f"finding {k} " + "." * 190)),
            )
        )
        await activation.release("idle")

        async def cycle(_: int) -> None:
            a = await activate(store, agent.id)
            await a.release("idle")

        figures.append(
            Figure(
                f"{sync}.acquire_release",
                "acquire the activation, then release it (two write transactions)",
                await timed(n, cycle),
            )
        )
        if sync == "full":
            for _ in range(99):
                await store.create_agent(AgentDefinition(type="explorer"), label="x" * 40)
            figures.append(
                Figure(
                    "read.list_agents",
                    "list_agents() over 100 agents (one query, lease probes)",
                    await timed(n, lambda _: store.list_agents()),
                )
            )
            figures.append(
                Figure(
                    "read.get",
                    "get(id): one agent's summary",
                    await timed(n, lambda _: store.get(agent.id)),
                )
            )
            figures.append(
                Figure(
                    "read.transcript",
                    f"transcript(id) of {grown + 4 * n} messages (what a cold resume reads)",
                    await timed(max(3, n // 10), lambda _: store.transcript(agent.id)),
                )
            )
    return figures


def blob_figures(root: Path, n: int, sizes: Sequence[int]) -> list[Figure]:
    """The design not taken: the transcript as one msgspec blob, rewritten on every turn."""
    figures = []
    enc = msgspec.json.Encoder()
    for size in sizes:
        path = root / f"blob-{size}.sqlite3"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, transcript BLOB)")
        messages = [m for k in range(size // 2) for m in turn(k)]
        conn.execute("INSERT INTO t VALUES (1, ?)", (enc.encode(messages),))
        samples = []
        for k in range(n):
            started = time.perf_counter()
            messages.extend(turn(k))
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE t SET transcript = ? WHERE id = 1", (enc.encode(messages),))
            conn.execute("COMMIT")
            samples.append(time.perf_counter() - started)
        conn.close()
        figures.append(
            Figure(
                f"blob.append_turn_{size}",
                f"not taken: rewrite a {size}-message transcript blob per turn (sync, no thread)",
                samples,
            )
        )
    return figures


async def run(root: Path, n: int, grown: int, blob_sizes: Sequence[int]) -> list[Figure]:
    figures = []
    for sync in ("full", "normal"):
        figures += await store_figures(root, sync, n, grown)  # type: ignore[arg-type]
    figures += blob_figures(root, max(3, n // 5), blob_sizes)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sample counts (smoke test)")
    ap.add_argument("--dir", type=Path, help="where the databases go (the filesystem matters)")
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args(argv)
    n = 5 if args.quick else args.samples
    grown = 100 if args.quick else 4000
    blob_sizes = (100, 1000) if args.quick else (100, 1000, 4000)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        fs = os.statvfs(root)
        figures = anyio.run(run, root, n, grown, blob_sizes)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"session store on {platform.node()}: Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version}, {os.cpu_count()} CPUs, load {load}, databases under "
        f"{args.dir or tempfile.gettempdir()} (block size {fs.f_bsize})\n"
    )
    print("| figure | what one sample is | n | median ms | p90 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for figure in figures:
        print(figure.row())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
