"""A child's three stdio pipes, created so that a failed spawn leaks no descriptor.

The parent's ends become byte streams (`tether.wire.streams`) once the child runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class StdioPipes:
    """Three fresh pipes for a child's stdin, stdout and stderr (all close-on-exec)."""

    child: tuple[int, int, int]
    """The child's ends: stdin's read end, stdout's and stderr's write ends."""
    ours: tuple[int, int, int]
    """Ours: stdin's write end, stdout's and stderr's read ends."""


@contextlib.contextmanager
def stdio_pipes() -> Iterator[StdioPipes]:
    """Create a child's stdio pipes around the block that hands their ends to it.

    The child's ends are always closed when the block ends (the child holds its own copies by
    then); ours are closed too when the block raises, so a failed spawn leaks nothing.
    """
    made: list[int] = []
    try:
        for _ in range(3):
            made.extend(os.pipe2(os.O_CLOEXEC))
    except OSError:
        for fd in made:
            os.close(fd)
        raise
    in_r, in_w, out_r, out_w, err_r, err_w = made
    pipes = StdioPipes(child=(in_r, out_w, err_w), ours=(in_w, out_r, err_r))
    try:
        yield pipes
    except BaseException:
        for fd in pipes.ours:
            os.close(fd)
        raise
    finally:
        for fd in pipes.child:
            os.close(fd)
