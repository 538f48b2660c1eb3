"""The trace file's two bounds and one policy: a run never waits for the disk beyond a bounded
buffer and a bounded wait for its last lines; past either, or past the size limit, tracing stops
with a last `stopped` line and the file is never longer than its limit."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tether.parent.trace.writer import STOP_RESERVE, TraceFile

pytestmark = pytest.mark.anyio


STALLED: list[StalledDisk] = []


class StalledDisk(TraceFile):
    """A trace file whose writes wait until the test lets the disk move."""

    def __init__(self, directory: Path, **kwargs: object) -> None:
        super().__init__(
            str(directory),
            "run-1.jsonl",
            append_to=kwargs.pop("append_to", None),  # type: ignore[arg-type]
            max_bytes=kwargs.pop("max_bytes", 1 << 20),  # type: ignore[arg-type]
            buffer_bytes=kwargs.pop("buffer_bytes", 1 << 20),  # type: ignore[arg-type]
            stop_line=lambda reason, size: f"stopped {size}: {reason}\n".encode(),
        )
        self.moving = threading.Event()
        self.moving.set()
        self.writes = 0
        STALLED.append(self)

    def _write_all(self, fd: int, data: bytes) -> None:
        self.writes += 1
        self.moving.wait()
        super()._write_all(fd, data)


@pytest.fixture(autouse=True)
def disks_move_again() -> Iterator[None]:
    """Every stalled disk moves again when its test ends, failed or not: a worker thread left
    waiting would keep the interpreter from exiting."""
    yield
    while STALLED:
        STALLED.pop().moving.set()


def line(n: int, size: int = 100) -> bytes:
    return f"{n:04d}".encode().ljust(size - 1, b"x") + b"\n"


async def wait_for(check: object, seconds: float = 5.0) -> None:
    with anyio.fail_after(seconds):
        while not check():  # type: ignore[operator]
            await anyio.sleep(0.01)


async def test_lines_wait_for_a_stalled_disk_in_the_buffer_and_are_written_in_order(
    tmp_path: Path,
) -> None:
    f = StalledDisk(tmp_path)
    f.moving.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(f.drain)
        f.put(line(0))
        await wait_for(lambda: f.writes == 1)  # the drain is stuck in the kernel
        for n in range(1, 50):
            assert f.put(line(n))  # taken at once, the disk notwithstanding
        assert f.stopped is None and f.written == 0
        f.moving.set()
        await f.flush(5)
        await f.aclose(5)
    assert (tmp_path / "run-1.jsonl").read_bytes() == b"".join(line(n) for n in range(50))


async def test_a_disk_that_falls_behind_by_more_than_the_buffer_stops_the_trace_not_the_run(
    tmp_path: Path,
) -> None:
    f = StalledDisk(tmp_path, buffer_bytes=4096)
    f.moving.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(f.drain)
        f.put(line(0))
        await wait_for(lambda: f.writes == 1)
        taken = [f.put(line(n)) for n in range(1, 100)]
        assert f.stopped is not None and f.stopped.startswith("the disk fell behind")
        # The line being written still waits: 40 lines of 100 bytes, and the 41st is too many.
        assert taken.count(True) == 39 and not any(taken[39:])
        f.moving.set()
        await f.aclose(5)
    written = (tmp_path / "run-1.jsonl").read_bytes().splitlines(keepends=True)
    assert written[:-1] == [line(n) for n in range(40)]
    assert written[-1].startswith(b"stopped 4000: the disk fell behind: 4000 bytes were")


async def test_lines_gathered_while_the_disk_keeps_up_never_count_as_falling_behind(
    tmp_path: Path,
) -> None:
    f = StalledDisk(tmp_path, buffer_bytes=4096)
    async with anyio.create_task_group() as tg:
        tg.start_soon(f.drain)
        await wait_for(lambda: f._fd is not None)
        for n in range(30):
            assert f.put(line(n))  # gathered, not yet written: the drain lingers
        assert f.put(line(30, 20_000))  # past the buffer, with nothing being written
        assert f.stopped is None
        await f.flush(5)
        await f.aclose(5)
    data = (tmp_path / "run-1.jsonl").read_bytes()
    assert data == b"".join(line(n) for n in range(30)) + line(30, 20_000)


async def test_a_result_waits_for_its_lines_no_longer_than_the_flush_bound(tmp_path: Path) -> None:
    f = StalledDisk(tmp_path)
    f.moving.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(f.drain)
        f.put(line(0))
        with anyio.fail_after(5):
            await f.flush(0.2)
        assert f.stopped == "the disk took more than 0.2 s to take the run's lines"
        f.moving.set()
        await f.aclose(5)
    assert (
        (tmp_path / "run-1.jsonl")
        .read_bytes()
        .endswith(b"stopped 100: the disk took more than 0.2 s to take the run's lines\n")
    )


async def test_closing_a_trace_whose_write_hangs_gives_up_and_the_thread_closes_the_file(
    tmp_path: Path,
) -> None:
    f = StalledDisk(tmp_path)
    f.moving.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(f.drain)
        f.put(line(0))
        await wait_for(lambda: f.writes == 1)
        fd = f._fd
        assert fd is not None
        with anyio.fail_after(5):
            await f.aclose(0.2)
    os.fstat(fd)  # the stuck thread still holds it
    f.moving.set()
    await wait_for(lambda: not _open(fd))
    assert (tmp_path / "run-1.jsonl").read_bytes() == line(0)


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@pytest.mark.parametrize("limit", [4096 + 100, 4096 + 950, 8192, 20_000])
async def test_a_trace_never_grows_past_its_size_limit_and_ends_with_why(
    tmp_path: Path, limit: int
) -> None:
    f = StalledDisk(tmp_path, max_bytes=limit)
    async with anyio.create_task_group() as tg:
        tg.start_soon(f.drain)
        for n in range(500):
            f.put(line(n, 100 + n % 7))
        await f.aclose(5)
    data = (tmp_path / "run-1.jsonl").read_bytes()
    assert len(data) <= limit
    last = data.splitlines()[-1]
    assert last.startswith(b"stopped ") and b"its size limit" in last
    kept = len(data) - len(last) - 1
    assert kept <= limit - STOP_RESERVE and f.stopped is not None


async def test_a_follow_up_never_appends_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_bytes(b"first\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    f = StalledDisk(tmp_path, append_to=str(link))
    f.put(line(0))
    async with anyio.create_task_group() as tg:
        tg.start_soon(f.drain)
        await f.aclose(5)
    assert f.stopped is not None and f.stopped.startswith("the trace could not be opened")
    assert real.read_bytes() == b"first\n"


async def test_a_follow_up_appends_and_the_existing_bytes_count_toward_the_limit(
    tmp_path: Path,
) -> None:
    real = tmp_path / "agent.jsonl"
    real.write_bytes(b"x" * 5000 + b"\n")
    f = StalledDisk(tmp_path, append_to=str(real), max_bytes=10_000)
    async with anyio.create_task_group() as tg:
        tg.start_soon(f.drain)
        await wait_for(lambda: f._fd is not None)
        assert f.put(line(0))
        assert not f.put(line(1, 1000))  # 5001 + 100 + 1000 > 10000 - 4096
        await f.aclose(5)
    lines = real.read_bytes().splitlines(keepends=True)
    assert lines[1] == line(0) and lines[2].startswith(b"stopped 5101: the trace reached")


async def test_a_line_json_cannot_hold_stops_the_trace_and_never_fails_the_run(
    tmp_path: Path,
) -> None:
    from tether.parent.trace.format import Header
    from tether.parent.trace.recorder import RunTrace
    from tether.parent.trace.spec import TraceSpec
    from tether.protocol.messages import (
        AgentDefinition,
        ChatMessage,
        ModelCompleteParams,
        ModelCompleteResult,
    )

    header = Header(
        run_id="run-1",
        wall=1.0,
        mono=1.0,
        tether_version="0",
        protocol_version=1,
        agent="general",
        definition=AgentDefinition(),
        prompt="p",
        workspace=str(tmp_path),
        provider="spawn",
    )
    trace = RunTrace(TraceSpec(tmp_path / "traces"), header)
    bad = ModelCompleteResult(message=ChatMessage(role="assistant", content="\ud800"))
    params = ModelCompleteParams(run_id="run-1", messages=[])
    async with anyio.create_task_group() as tg:
        tg.start_soon(trace.drain)
        trace.turn(params, trace.begin(), slot="main", model="m", response=bad)  # no raise
        await trace.aclose(5)
    assert trace.report().stopped is not None
    assert trace.report().stopped.startswith("a turn line could not be written as JSON")
    lines = Path(trace.path).read_bytes().splitlines()
    assert [json.loads(ln)["kind"] for ln in lines] == ["header", "stopped"]
