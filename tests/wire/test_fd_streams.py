"""Fd byte streams: a write cancelled part-way through a message is finished (bounded), never
left half-written on the wire; a read end closed locally wakes its reader to end of stream."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import anyio
import pytest

from tether.wire import FdReceiveStream, FdSendStream
from tether.wire.streams import READ_CHUNK

pytestmark = pytest.mark.anyio

F_GETPIPE_SZ = 1032  # fcntl.F_GETPIPE_SZ (Linux)
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


async def test_what_arrives_while_nobody_receives_is_kept_for_the_next_receive() -> None:
    r, w = os.pipe()
    reader = FdReceiveStream(r)
    try:
        os.write(w, b"one\n")
        with anyio.fail_after(5):
            assert await reader.receive() == b"one\n"  # the pipe stays watched from here
            os.write(w, b"two\n")
            await anyio.sleep(0.05)  # the loop reads it and holds it: nobody is receiving
            os.write(w, b"three\n")
            await anyio.sleep(0.05)  # reading is paused: this stays in the pipe
            assert reader.unread() == len(b"two\nthree\n")
            got = b""
            while got != b"two\nthree\n":
                got += await reader.receive(3)  # a held chunk is handed out in pieces too
    finally:
        reader.close()
        os.close(w)


async def test_pipes_sharing_the_loops_read_buffer_each_keep_their_own_bytes() -> None:
    # Every pipe of a loop reads into one buffer: what a pipe holds unreceived must be its
    # own copy, untouched by the other pipes' reads that came after it.
    pipes = [os.pipe() for _ in range(3)]
    readers = [FdReceiveStream(r) for r, _ in pipes]
    try:
        with anyio.fail_after(5):
            for reader, (_, w) in zip(readers, pipes, strict=True):
                os.write(w, b"warm\n")
                assert await reader.receive() == b"warm\n"  # each pipe is now watched
            payloads = [bytes([ord("a") + i]) * 50_000 for i in range(3)]
            for (_, w), payload in zip(pipes, payloads, strict=True):
                os.write(w, payload)
                await anyio.sleep(0.05)  # read into the shared buffer and held
            for reader, payload in zip(readers, payloads, strict=True):
                got = b""
                while len(got) < len(payload):
                    got += await reader.receive()
                assert got == payload
    finally:
        for reader, (_, w) in zip(readers, pipes, strict=True):
            reader.close()
            os.close(w)


async def test_a_receive_cancelled_while_waiting_loses_nothing() -> None:
    r, w = os.pipe()
    reader = FdReceiveStream(r)
    try:
        with anyio.fail_after(5):
            with anyio.move_on_after(0.05):
                await reader.receive()
            os.write(w, b"after\n")
            assert await reader.receive() == b"after\n"
    finally:
        reader.close()
        os.close(w)


async def test_a_reader_that_does_not_receive_takes_at_most_one_chunk_so_the_pipe_fills() -> None:
    r, w = os.pipe()
    reader = FdReceiveStream(r)
    os.set_blocking(w, False)
    try:
        with anyio.fail_after(5):
            os.write(w, b"first\n")
            assert await reader.receive() == b"first\n"  # watched from here on
            written = full = 0
            while full < 3:  # the pipe stays full across event-loop turns
                try:
                    written += os.write(w, b"x" * 65536)
                    full = 0
                except BlockingIOError:
                    full += 1
                    await anyio.sleep(0.02)
        capacity = fcntl.fcntl(w, F_GETPIPE_SZ)
        assert written <= capacity + READ_CHUNK
        assert reader.unread() == written
    finally:
        reader.close()
        os.close(w)


def test_a_reader_used_under_one_event_loop_and_then_another_reads_on() -> None:
    r, w = os.pipe()
    reader = FdReceiveStream(r)
    try:
        for word in (b"one\n", b"two\n"):
            os.write(w, word)
            assert anyio.run(reader.receive) == word
    finally:
        reader.close()
        os.close(w)


async def test_a_read_into_a_buffer_cancelled_while_waiting_loses_nothing() -> None:
    r, w = os.pipe()
    reader = FdReceiveStream(r)
    into = memoryview(bytearray(64))
    try:
        with anyio.fail_after(5):
            with anyio.move_on_after(0.05):
                await reader.receive_into(into)
            os.write(w, b"after\n")
            n = await reader.receive_into(into)
            assert bytes(into[:n]) == b"after\n"
    finally:
        reader.close()
        os.close(w)


async def test_bytes_read_into_a_buffer_for_a_receiver_cancelled_as_they_came_are_not_lost() -> (
    None
):
    r, w = os.pipe()
    reader = FdReceiveStream(r)
    into = memoryview(bytearray(64))
    got = []
    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def receive() -> None:
                    with scope:
                        n = await reader.receive_into(into)
                        got.append(bytes(into[:n]))

                tg.start_soon(receive)
                await anyio.sleep(0.05)  # it waits, registered with the loop
                os.write(w, b"kept\n")
                reader._watch._ready()  # type: ignore[union-attr]  # the loop's read, by hand
                scope.cancel()  # before the receiver resumed: the bytes are in `into` only
            if not got:  # the cancellation won: the bytes wait for the next receive
                got.append(await reader.receive())
            assert got == [b"kept\n"]
            os.write(w, b"next\n")
            assert await reader.receive() == b"next\n"
    finally:
        reader.close()
        os.close(w)


async def test_a_file_is_read_into_a_buffer_too(tmp_path: Path) -> None:
    path = tmp_path / "replay"
    path.write_bytes(b"x" * 100 + b"\n")
    reader = FdReceiveStream(os.open(path, os.O_RDONLY), grow=True)  # not a pipe: never grown
    into = memoryview(bytearray(64))
    try:
        with anyio.fail_after(5):
            got = b""
            while len(got) < 101:
                n = await reader.receive_into(into)
                got += bytes(into[:n])
            with pytest.raises(anyio.EndOfStream):
                await reader.receive_into(into)
    finally:
        reader.close()
    assert got == b"x" * 100 + b"\n"
