"""`bash({command, timeout?})`: run `/bin/bash -c command` in the workspace.

The command runs with the workspace root as its cwd, stdin on /dev/null, and stdout and stderr
captured together into one capped buffer (never the wire: the child's fd 1 is stderr anyway).
It gets its own process group (`process_group=0`) but stays in the child's session, so the
parent's teardown of the child's tree still takes it: no `setsid`. When the shell exits, on
timeout, and when the run is cancelled, the whole group is SIGKILLed, background jobs included.
Mutating: explore mode denies it, build mode asks the parent first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
from msgspec import Meta, Struct

from tether.child.tools.base import (
    ToolContext,
    ToolOutcome,
    parse_arguments,
    sandbox_note,
    schema_of,
)

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
MAX_OUTPUT_BYTES = 30_000
DRAIN_SECONDS = 1.0
"""After the shell exits, how long output still in flight may take to arrive."""


class BashArgs(Struct, frozen=True, forbid_unknown_fields=True):
    command: str
    """A bash command line; it runs in the workspace root."""
    timeout: Annotated[float, Meta(gt=0, le=MAX_TIMEOUT)] = DEFAULT_TIMEOUT
    """Seconds before the command and everything it started are killed."""


class BashTool:
    name = "bash"
    description = (
        "Run a bash command in the workspace root (stdin is empty). Returns the exit status "
        "and the combined stdout/stderr, capped. Background processes are killed when the "
        "command returns."
    )
    input_schema = schema_of(BashArgs)
    mutates = True

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env) if env is not None else None
        """The commands' environment; `None`: this process's own (a child's is scrubbed
        already; a runtime hosted inside the parent passes a scrubbed one)."""

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(BashArgs, arguments)
        if "\0" in args.command:
            return ToolOutcome(content="refused: the command contains a NUL byte", is_error=True)
        proc = await asyncio.create_subprocess_exec(
            "/bin/bash",
            "-c",
            args.command,
            cwd=ctx.workspace.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=False,
            process_group=0,
        )
        out = _Capture()
        try:
            timed_out = await _wait(proc, out, args.timeout)
        finally:
            _kill_group(proc.pid)
            if proc.returncode is None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await proc.wait()
        text = out.text()
        if timed_out:
            return ToolOutcome(
                content=f"timed out after {args.timeout:g}s; the command and its processes "
                f"were killed\n{text}",
                is_error=True,
            )
        rc = proc.returncode
        assert rc is not None
        status = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        return ToolOutcome(content=f"{status}\n{text}{sandbox_note(text)}", is_error=rc != 0)


class _Capture:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.dropped = 0
        self.done = anyio.Event()

    async def pump(self, stream: asyncio.StreamReader) -> None:
        try:
            while chunk := await stream.read(65536):
                keep = max(0, MAX_OUTPUT_BYTES - len(self.buf))
                self.buf += chunk[:keep]
                self.dropped += len(chunk) - min(keep, len(chunk))
        finally:
            self.done.set()

    def text(self) -> str:
        text = self.buf.decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n... ({self.dropped} more bytes of output dropped)"
        return text


async def _wait(proc: asyncio.subprocess.Process, out: _Capture, limit: float) -> bool:
    """Wait for the shell (at most `limit` seconds), then its output; True if it timed out."""
    assert proc.stdout is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(out.pump, proc.stdout)
        with anyio.move_on_after(limit) as waited:
            await _exited(proc)
        # The shell is gone (or timed out): its group goes too, so no background job keeps
        # running or holds the pipe open.
        _kill_group(proc.pid)
        with anyio.move_on_after(DRAIN_SECONDS):
            await out.done.wait()
        tg.cancel_scope.cancel()
    return waited.cancelled_caught


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Wait for the shell itself to exit. (`proc.wait()` also waits for its pipes to close,
    which a background job holding stdout would postpone until the timeout.)"""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return
    try:
        await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
