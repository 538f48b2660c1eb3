"""Larger pipes only while a large message is in flight, within a process-wide page budget.

A pipe holds 64 KiB by default, so a 1 MiB message crosses it in 16+ writes, each waking the
reader. Growing the pipe to 1 MiB (`F_SETPIPE_SZ`) lets one write and one read move it. But pipe
pages count against the user's `fs.pipe-user-pages-soft`; past it every new pipe of the user
gets 2 pages. So a pipe is grown only while a large message crosses it (the writer knows the
size before it writes, the reader once a line passes the long-line threshold), shrunk back
when it has drained, and all grown pipes of the process together stay within `Budget` (at most
1/16 of the soft limit, at most 1,024 pages): 256 children cannot push the user past it.

Growing is a hint: a failure (EPERM past the user's limit, EBUSY, a kernel without it) is
silent, and nothing depends on it but speed.
"""

from __future__ import annotations

import errno
import fcntl
import os

BIG = 1024 * 1024
"""What a pipe is grown to (the default `fs.pipe-max-size`: the most an unprivileged user gets)."""
MAX_PAGES = 1024
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def default_pages() -> int:
    """The process's budget: 1/16 of the user's soft pipe-page limit, at most `MAX_PAGES`."""
    try:
        with open("/proc/sys/fs/pipe-user-pages-soft") as f:
            soft = int(f.read().strip())
    except (OSError, ValueError):
        return 0
    if soft <= 0:  # no soft limit
        return MAX_PAGES
    return min(soft // 16, MAX_PAGES)


class Budget:
    """The grown pipes of one process and the pages they hold (see the module docstring)."""

    __slots__ = ("_grown", "pages", "used")

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.used = 0
        self._grown: dict[int, tuple[int, int]] = {}
        """fd → (its size before growing, the pages counted for it)."""

    def grown(self, fd: int) -> bool:
        return fd in self._grown

    def grow(self, fd: int, size: int = BIG) -> bool:
        """Grow pipe `fd` to `size` bytes if the budget allows; whether it is grown."""
        if fd in self._grown:
            return True
        pages = -(-size // PAGE)
        if self.used + pages > self.pages:
            self.reclaim()
            if self.used + pages > self.pages:
                return False
        try:
            before = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
            if before >= size:
                return False
            got = fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
        except (OSError, AttributeError):
            return False
        counted = -(-got // PAGE)
        self._grown[fd] = (before, counted)
        self.used += counted
        return True

    def shrink(self, fd: int) -> bool:
        """Give pipe `fd` back its old size; `False` while it still holds more than that."""
        entry = self._grown.get(fd)
        if entry is None:
            return True
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, entry[0])
        except OSError as exc:
            if exc.errno == errno.EBUSY:  # it holds more than that: try again later
                return False
            # The fd is not that pipe any more (closed): its pages are not ours to count.
        self._forget(fd)
        return True

    def forget(self, fd: int) -> None:
        """`fd` is about to be closed: shrink it if it can be, stop counting it either way."""
        if fd in self._grown:
            self.shrink(fd)
            self._forget(fd)

    def _forget(self, fd: int) -> None:
        entry = self._grown.pop(fd, None)
        if entry is not None:
            self.used -= entry[1]

    def reclaim(self) -> None:
        """Shrink every grown pipe that has drained."""
        for fd in list(self._grown):
            self.shrink(fd)


BUDGET = Budget(default_pages())
"""The process's budget. Only streams made with `grow=True` use it (the parent's pipes to its
children); a child never grows its pipes, so many children cannot multiply the budget."""
