"""A private network namespace whose only ways out are listeners the parent serves.

A foreign agent (an ACP agent, a `command` child with its own model client) needs the parent's
model gateway; a run with a network policy needs the parent's egress proxy (both, for a
foreign agent with a policy). Run as root in the trampoline, before the uid change,
`enter_private_namespace(ports, channel_fd)`:

1. `unshare(CLONE_NEWNET)`: a new network namespace, which has only a loopback interface,
   down, and no route anywhere;
2. brings loopback up (`SIOCSIFFLAGS`), so 127.0.0.1 works inside;
3. makes one TCP socket listening on 127.0.0.1 per port of `ports` inside it (always free:
   the namespace is new) and sends them, in that order, to the parent over the inherited
   UNIX socket `channel_fd` with `SCM_RIGHTS`; the parent serves each (the gateway's
   `listen_on`, the run's proxy);
4. closes them all, so the child holds none.

From then on, whatever the child connects to inside the namespace is one of those listeners,
or nothing (connection refused); the host's loopback and every other address are unreachable.
Abstract UNIX sockets are per network namespace too. The seccomp filter's `inet` variant
and the Landlock port rule (`sequence.py`) close the rest: no UNIX sockets, no UDP, TCP to
those ports only.

Only the standard library (see `_sys.py`).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from collections.abc import Sequence

from tether.contain._sys import check, libc

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
GATEWAY_HOST = "127.0.0.1"
CHANNEL_TAG = b"tether-netns"
"""The bytes sent beside the listening sockets (a receiver checks it)."""


def enter_private_namespace(ports: Sequence[int], channel_fd: int) -> None:
    """Steps 1-4 of the module docstring; raises `OSError` (the child must not run then).
    `channel_fd` is closed on every path."""
    try:
        channel = socket.socket(fileno=channel_fd)
    except OSError:
        os.close(channel_fd)
        raise
    with channel:
        check(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        loopback_up()
        listeners: list[socket.socket] = []
        try:
            for port in ports:
                listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listeners.append(listener)
                listener.bind((GATEWAY_HOST, port))
                listener.listen(128)
            socket.send_fds(channel, [CHANNEL_TAG], [s.fileno() for s in listeners])
        finally:
            for listener in listeners:
                listener.close()


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))
        flags = struct.unpack("16sH", got[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))
