"""Pipes grown only while a large message crosses them, within the process's page budget."""

from __future__ import annotations

import fcntl
import os
import tempfile

import anyio
import pytest

from tether.wire import FdReceiveStream, FdSendStream
from tether.wire.pipesize import BIG, BUDGET, MAX_PAGES, PAGE, Budget, default_pages

F_GETPIPE_SZ = 1032


def test_many_pipes_in_flight_never_exceed_the_budget() -> None:
    budget = Budget(pages=3 * BIG // PAGE)
    pipes = [os.pipe() for _ in range(12)]
    try:
        grown = []
        for _, w in pipes:
            grown.append(budget.grow(w))
            if grown[-1]:
                os.write(w, b"x" * 100_000)  # in flight: cannot be shrunk to make room
            assert budget.used <= budget.pages
        assert sum(grown) == 3
        assert budget.used <= budget.pages
        for (_, w), ok in zip(pipes, grown, strict=True):
            assert fcntl.fcntl(w, F_GETPIPE_SZ) == (BIG if ok else 65536)
    finally:
        for r, w in pipes:
            budget.forget(w)
            os.close(r)
            os.close(w)
    assert budget.used == 0


def test_a_pipe_is_shrunk_back_once_its_message_has_drained() -> None:
    budget = Budget(pages=MAX_PAGES)
    r, w = os.pipe()
    try:
        assert budget.grow(w)
        os.write(w, b"x" * 300_000)
        assert not budget.shrink(w)  # still holds more than the default size
        assert budget.grown(w) and fcntl.fcntl(w, F_GETPIPE_SZ) == BIG
        got = 0
        while got < 300_000:
            got += len(os.read(r, 1 << 20))
        assert budget.shrink(w)
        assert fcntl.fcntl(w, F_GETPIPE_SZ) == 65536
        assert budget.used == 0
    finally:
        os.close(r)
        os.close(w)


def test_a_drained_pipe_gives_its_pages_to_the_next_one() -> None:
    budget = Budget(pages=BIG // PAGE)
    (r1, w1), (r2, w2) = os.pipe(), os.pipe()
    try:
        assert budget.grow(w1)
        assert budget.grow(w2)  # w1 is empty: reclaimed for w2
        assert not budget.grown(w1) and budget.grown(w2)
        assert fcntl.fcntl(w1, F_GETPIPE_SZ) == 65536
    finally:
        budget.forget(w2)
        for fd in (r1, w1, r2, w2):
            os.close(fd)


def test_growth_failure_is_harmless() -> None:
    budget = Budget(pages=MAX_PAGES)
    with tempfile.TemporaryFile() as f:
        assert not budget.grow(f.fileno())  # not a pipe
    assert budget.used == 0
    assert not Budget(pages=0).grow(os.pipe()[1])


def test_the_default_budget_is_a_sixteenth_of_the_soft_limit_at_most_1024_pages() -> None:
    with open("/proc/sys/fs/pipe-user-pages-soft") as f:
        soft = int(f.read())
    assert default_pages() == (min(soft // 16, MAX_PAGES) if soft else MAX_PAGES)


@pytest.mark.anyio
async def test_a_growing_writer_and_reader_move_large_messages_intact_and_shrink_after() -> None:
    r, w = os.pipe()
    writer = FdSendStream(w, grow=True)
    reader = FdReceiveStream(r, grow=True)
    msgs = [bytes([65 + i]) * (700_000 + i) + b"\n" for i in range(3)] + [b"small\n"]
    got = bytearray()

    async def read_all() -> None:
        into = bytearray(1 << 20)
        view = memoryview(into)
        while len(got) < sum(map(len, msgs)):
            if len(got) % 2:
                got.extend(await reader.receive())
            else:
                n = await reader.receive_into(view)
                got.extend(view[:n])

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_all)
                for m in msgs:
                    await writer.send(m)
        assert bytes(got) == b"".join(msgs)
        # The small message came after the large ones: the pipe is back to its default size
        # (or will be at the next small write, if it had not drained yet).
        await writer.send(b"x\n")
        await reader.receive()
        await writer.send(b"y\n")
        assert not BUDGET.grown(w)
        assert fcntl.fcntl(w, F_GETPIPE_SZ) == 65536
    finally:
        writer.close()
        reader.close()
    assert not BUDGET.grown(w) and not BUDGET.grown(r)
