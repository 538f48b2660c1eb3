"""Large messages (1-8 MiB) each way through real children, with small ones interleaved: they
arrive intact and in order (the long-line buffer, pipes grown while they cross)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.parent.process.host import host
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.process.spawn import spawn_child
from tether.parent.process.supervised import SupervisedChild
from tether.protocol.messages import PROTOCOL_VERSION, Empty, InitializeParams, PeerInfo
from tether.wire.pipesize import BUDGET

pytestmark = pytest.mark.anyio

CHILDREN = Path(__file__).resolve().parent.parent / "children"
MIB = 1 << 20
QUICK = DisposePolicy(shutdown=5.0, eof=1.0, term=1.0, kill=2.0)


async def _spawn(argv: tuple[str, ...]) -> SupervisedChild:
    child = await spawn_child(ChildConfig(command=argv, dispose=QUICK), Limits(), host(), "bulk")
    assert isinstance(child, SupervisedChild)
    return child


async def _initialize(child: SupervisedChild) -> None:
    await child.session.initialize(
        InitializeParams(protocol_version=PROTOCOL_VERSION, client_info=PeerInfo(name="t"))
    )
    child.ready = True


def _pattern(tag: str, n: int) -> str:
    unit = f"{tag}:" + "0123456789abcdef" * 4
    return (unit * (n // len(unit) + 1))[:n]


async def test_large_messages_each_way_arrive_intact_and_in_order_with_small_ones_between() -> None:
    sizes = [MIB, 3 * MIB, 8 * MIB, 2 * MIB]
    done: list[str] = []
    async with await _spawn((sys.executable, "-I", str(CHILDREN / "bulk_echo.py"))) as child:
        with anyio.fail_after(60):
            await _initialize(child)

            async def big(i: int, n: int) -> None:
                pad = _pattern(f"p{i}", n // 2)
                raw = await child.endpoint.request_raw(
                    "x/bulk", {"tag": f"c{i}", "n": n, "pad": pad}
                )
                got = msgspec.json.decode(raw)
                assert got["pad"] == _pattern(f"c{i}", n)
                assert got["got"] == len(pad)
                assert got["sha"] == hashlib.sha256(pad.encode()).hexdigest()
                done.append(f"big{i}")

            async def small(i: int) -> None:
                await child.endpoint.request_raw("ping", Empty())
                done.append(f"small{i}")

            async with anyio.create_task_group() as tg:
                for i, n in enumerate(sizes):
                    tg.start_soon(big, i, n)
                    tg.start_soon(small, i)
            # After the bulk, small messages again: the pipes go back to their default size.
            for i in range(3):
                await small(100 + i)
            assert not BUDGET.grown(child.proc.stdin.fd)
            assert not BUDGET.grown(child.proc.stdout.fd)
    assert sorted(done) == sorted(
        [f"big{i}" for i in range(len(sizes))]
        + [f"small{i}" for i in range(len(sizes))]
        + [f"small{100 + i}" for i in range(3)]
    )
    assert BUDGET.used == 0


async def test_large_requests_to_the_tether_child_are_read_and_answered_in_order() -> None:
    order: list[int] = []
    async with await _spawn(tuple(DEFAULT_COMMAND)) as child:
        with anyio.fail_after(60):
            await _initialize(child)
            for i, n in enumerate([MIB, 8 * MIB, 16, 4 * MIB, 16, 16]):
                await child.endpoint.request_raw("ping", {"pad": "y" * n})
                order.append(i)
            async with anyio.create_task_group() as tg:
                for n in (2 * MIB, 10, 5 * MIB, 10):
                    tg.start_soon(child.endpoint.request_raw, "ping", {"pad": "z" * n})
            assert child.endpoint.end is None  # nothing the child sent broke the conversation
    assert order == list(range(6))
