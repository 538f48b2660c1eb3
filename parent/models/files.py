"""Reading a file a user named as a model's input (a script, a trace): a regular file of
bounded size, never a FIFO or a device, opened without blocking and checked before any read."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_bounded(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of `path`; raises `ValueError` naming `what` ("model script", "trace") when it
    cannot be read, is not a regular file, or holds more than `limit` bytes. Blocking file
    I/O: callers on an event loop run it in a worker thread."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"cannot read {what} {str(p)!r}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{what} {str(p)!r} is not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{what} {str(p)!r} is {st.st_size} bytes; the limit is {limit}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {what} {str(p)!r}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{what} {str(p)!r} passed {limit} bytes")
    return data
