"""A private network namespace whose one way out is the model gateway.

A foreign agent (an ACP agent, a `command` child with its own model client) needs one network
destination: the parent's model gateway. Run as root in the trampoline, before the uid change,
`enter_gateway_namespace(port, channel_fd)`:

1. `unshare(CLONE_NEWNET)`: a new network namespace, which has only a loopback interface,
   down, and no route anywhere;
2. brings loopback up (`SIOCSIFFLAGS`), so 127.0.0.1 works inside;
3. makes a TCP socket listening on 127.0.0.1:`port` inside it (always free: the namespace is
   new) and sends it to the parent over the inherited UNIX socket `channel_fd` with
   `SCM_RIGHTS`; the parent's gateway accepts connections on it (`Gateway.listen_on`);
4. closes both, so the agent holds neither.

From then on, whatever the agent connects to inside the namespace is that one listener, or
nothing (connection refused); the host's loopback and every other address are unreachable.
Abstract UNIX sockets are per network namespace too. The seccomp filter's `inet` variant
and the Landlock port rule (`sequence.py`) close the rest: no UNIX sockets, no UDP, TCP to
that port only.

Only the standard library (see `_sys.py`).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct

from tether.contain._sys import check, libc

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
GATEWAY_HOST = "127.0.0.1"
CHANNEL_TAG = b"tether-gateway"
"""The bytes sent beside the listening socket (a receiver checks it)."""


def enter_gateway_namespace(port: int, channel_fd: int) -> None:
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
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.bind((GATEWAY_HOST, port))
            listener.listen(128)
            socket.send_fds(channel, [CHANNEL_TAG], [listener.fileno()])


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))
        flags = struct.unpack("16sH", got[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))
