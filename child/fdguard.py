"""Move the wire off fds 0/1 before any other code can write to them.

The protocol owns the child's stdin/stdout, but fd 1 is also where a stray `print()`, a C
library or a tool's subprocess would write by default, and one such byte corrupts the stream.
So the very first thing the child does is take private duplicates of fds 0 and 1 for the wire,
then point fd 1 at stderr (free text the parent drains) and fd 0 at /dev/null. From then on
nothing but the protocol writer can reach the parent's pipe.

Then the child makes itself non-dumpable: a process a tool starts runs as the same user (and,
in a sandbox, in the same Landlock domain), and could otherwise reopen the wire through
`/proc/<child>/fd/N` and speak for the child, or ptrace it. A non-dumpable process's /proc
files belong to root and it cannot be traced without CAP_SYS_PTRACE; exec resets the flag, so
the tools themselves stay ordinary processes.

This module imports only `os`, `sys` and `tether.contain.privileges` (`_ctypes`), so `__main__`
can run it before anything else loads.
"""

from __future__ import annotations

import os
import sys

from tether.contain.privileges import set_dumpable


class WireFds:
    """The private descriptors the protocol is spoken on.

    A plain class: a `NamedTuple` costs ≈ 0.2 ms to define, on every cold start's path."""

    __slots__ = ("read_fd", "write_fd")

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd


def claim_wire() -> WireFds:
    """Take the wire off fds 0/1 and leave harmless targets in their place.

    `os.dup` returns non-inheritable (O_CLOEXEC) descriptors, so subprocesses never hold the
    wire: when the child exits, the parent sees EOF even if a grandchild lingers.
    """
    # A closed fd 2 would be handed out by the dups below and then aliased onto fd 1; fill it
    # with /dev/null first so "stderr" is always a harmless sink.
    try:
        os.fstat(2)
    except OSError:
        _point_at_devnull(2, os.O_WRONLY)
    read_fd = os.dup(0)
    write_fd = os.dup(1)

    # fd 1 → stderr, so writes meant for "stdout" become log text.
    os.dup2(2, 1)
    # fd 0 → /dev/null: a tool that reads stdin gets EOF instead of stealing protocol bytes.
    _point_at_devnull(0, os.O_RDONLY)

    # The Python-level stream wrapped the old fd 1; rebind it so buffered text takes the same
    # path as everything else written to stderr (and keeps its order with it).
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    set_dumpable(False)
    return WireFds(read_fd, write_fd)


def _point_at_devnull(fd: int, flags: int) -> None:
    null = os.open(os.devnull, flags)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
