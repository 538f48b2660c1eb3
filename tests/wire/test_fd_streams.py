"""Fd byte streams: a write cancelled part-way through a message is finished (bounded), never
left half-written on the wire; a read end closed locally wakes its reader to end of stream."""

from __future__ import annotations

import os
import threading
import time

import anyio
import pytest

from tether.wire import FdReceiveStream, FdSendStream

pytestmark = pytest.mark.anyio

BIG = b"x" * (1 << 20) + b"\n"
"""Far more than a pipe holds, so the write must wait for the reader part-way through."""


def _drain_later(fd: int, delay: float, got: bytearray) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        while chunk := os.read(fd, 1 << 16):
            got.extend(chunk)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_a_write_cancelled_after_its_first_byte_still_delivers_the_whole_line() -> None:
    r, w = os.pipe()
    got = bytearray()
    reader = _drain_later(r, 0.1, got)
    writer = FdSendStream(w)
    try:
        with anyio.move_on_after(0.02) as scope:
            await writer.send(BIG)
        assert not writer.closed
        await writer.send(b"next\n")  # the writer is still usable, and in order
    finally:
        writer.close()
    reader.join(5)
    os.close(r)
    assert scope.cancel_called
    assert bytes(got) == BIG + b"next\n"


async def test_a_write_cancelled_before_its_first_byte_sends_nothing_and_keeps_the_writer() -> None:
    r, w = os.pipe()
    writer = FdSendStream(w)
    try:
        filled = 0
        while True:  # fill the pipe: the next message cannot get its first byte out
            try:
                filled += os.write(w, b"y" * 4096)
            except BlockingIOError:
                break
        with anyio.move_on_after(0.05) as scope:
            await writer.send(b"never\n")
        assert scope.cancelled_caught
        assert not writer.closed
        got = bytearray()
        while len(got) < filled:
            got.extend(os.read(r, 1 << 16))
        assert bytes(got) == b"y" * filled
    finally:
        writer.close()
        os.close(r)


async def test_a_reader_that_stops_mid_message_gets_the_pipe_closed_instead_of_a_hang() -> None:
    r, w = os.pipe()
    writer = FdSendStream(w, finish_seconds=0.2)
    started = time.monotonic()
    try:
        with pytest.raises(anyio.BrokenResourceError, match="half a line"):
            with anyio.fail_after(5):
                await writer.send(BIG)  # nobody reads: stuck after the first 64 KiB
        assert writer.closed
        assert 0.15 < time.monotonic() - started < 2
        with pytest.raises(anyio.ClosedResourceError):
            await writer.send(b"more\n")
    finally:
        writer.close()
        os.close(r)


async def test_a_stuck_reader_and_a_cancelled_caller_still_end_within_the_finish_bound() -> None:
    r, w = os.pipe()
    writer = FdSendStream(w, finish_seconds=0.2)
    started = time.monotonic()
    try:
        with pytest.raises(anyio.BrokenResourceError), anyio.move_on_after(0.01):
            await writer.send(BIG)
        assert writer.closed
        assert time.monotonic() - started < 2
    finally:
        writer.close()
        os.close(r)


async def test_a_reader_closed_locally_wakes_to_end_of_stream() -> None:
    r, w = os.pipe()
    reader = FdReceiveStream(r)
    got: list[str] = []

    async def read() -> None:
        try:
            await reader.receive()
        except anyio.EndOfStream:
            got.append("end")

    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await anyio.sleep(0.05)
                reader.close()
    finally:
        os.close(w)
    assert got == ["end"]


async def test_a_reader_counts_what_waits_unread_and_reports_end_of_stream() -> None:
    r, w = os.pipe()
    reader = FdReceiveStream(r)
    try:
        os.write(w, b"abc\n")
        assert reader.unread() == 4
        assert await reader.receive() == b"abc\n"
        os.close(w)
        with pytest.raises(anyio.EndOfStream):
            await reader.receive()
    finally:
        reader.close()
    assert reader.unread() == 0
