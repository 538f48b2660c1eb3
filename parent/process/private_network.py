"""The parent's side of a sandboxed child's network: the listeners it serves for the child.

A child that must reach something the parent serves — a foreign agent's model gateway, a run's
egress proxy, or both — gets a `PrivateNetwork` in its sandbox plan (`isolation.plan_for`):

- with a `channel` (a root supervisor): the trampoline makes a private network namespace with
  one listener on 127.0.0.1 per port and sends them back over that UNIX socket
  (`tether.contain.netns`); `open_channel()` makes the socketpair and draws the ports, and
  `receive_listeners()` takes the sockets on the parent's end, in the order of the ports;
- without one (no root): the child keeps the host's network, and the sandbox's Landlock rule
  lets it connect to those TCP ports only (listeners the parent made on its own loopback).

Either way the seccomp filter's `inet` variant applies: TCP sockets, no UNIX socket, no UDP.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

NETNS_PORTS = (20000, 60000)
"""The ports of listeners inside a private namespace are drawn from here (always free there)."""


@dataclass(frozen=True)
class PrivateNetwork:
    """The TCP ports a sandboxed child may connect to, and the descriptor its private network
    namespace's listeners come back on (`None`: no namespace; see the module docstring)."""

    ports: tuple[int, ...]
    channel: int | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"ports": list(self.ports)}
        if self.channel is not None:
            out["channel"] = self.channel
        return out


@dataclass
class Channel:
    """The two ends of the socketpair a namespace's listeners come back on: `ours` stays in
    the parent, `theirs` is passed to the child (and closed here once it is spawned)."""

    ours: socket.socket
    theirs: socket.socket | None
    ports: tuple[int, ...]

    def network(self) -> PrivateNetwork:
        assert self.theirs is not None
        return PrivateNetwork(self.ports, self.theirs.fileno())

    def spawned(self) -> None:
        """The child holds its end now: ours no longer needs it."""
        if self.theirs is not None:
            self.theirs.close()
            self.theirs = None

    def close(self) -> None:
        self.spawned()
        self.ours.close()


def open_channel(count: int) -> Channel:
    """A socketpair and `count` distinct ports drawn for the namespace's listeners."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    low, high = NETNS_PORTS
    ports: list[int] = []
    while len(ports) < count:
        port = low + secrets.randbelow(high - low)
        if port not in ports:
            ports.append(port)
    return Channel(ours, theirs, tuple(ports))


async def receive_listeners(
    channel: socket.socket, count: int, seconds: float
) -> Sequence[socket.socket] | None:
    """The `count` listening sockets the trampoline made inside the child's namespace, in the
    order of its ports, or `None` when they did not all come within `seconds` (the trampoline
    failed, or the channel closed); what did come is closed then."""
    channel.setblocking(False)
    with anyio.move_on_after(seconds):
        while True:
            await anyio.wait_readable(channel)
            try:
                _, fds, _, _ = socket.recv_fds(channel, 64, max(count, 1))
            except BlockingIOError:
                continue
            except OSError:
                return None
            if not fds:
                return None  # end of stream: nothing was sent
            got = [socket.socket(fileno=fd) for fd in fds]
            if len(got) != count or any(
                s.family != socket.AF_INET or s.type != socket.SOCK_STREAM for s in got
            ):
                for s in got:
                    s.close()
                return None
            return got
    return None


__all__ = ["NETNS_PORTS", "Channel", "PrivateNetwork", "open_channel", "receive_listeners"]
