"""Where the egress proxy may connect: names resolved by the parent, addresses checked.

The child has no resolver and no route: the proxy resolves every name itself, checks every
address the name resolved to, and connects to one of those very addresses (a connection is
pinned: nothing is resolved again between the check and the connect, so a name that answers
differently the second time — DNS rebinding — gains nothing).

An address is never relayed to when it is loopback, link-local (the cloud metadata address
among them), unspecified, multicast or broadcast, or one of this host's own addresses, unless
the policy lists that very IP literal (`127.0.0.1:8080`): a name that resolves to one is
refused, whatever the allowlist says, and so is a name any of whose addresses is one (a
rebinding name often answers with both). Private ranges (10/8, 192.168/16, ...) are allowed
when a name resolves there: an internal package index is a common allowed destination.

`Resolver` is what the proxy asks; `SystemResolver` (getaddrinfo, off the event loop) is the
default. `NameTable` is the test hook: a fixed table of names, whose `public` answers stand in
for addresses on the public internet (so tests can play allowed hosts with servers on
127.0.0.1, nothing leaving the host) while its `other` answers are checked like real ones.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Resolved:
    """The addresses a name resolved to; `stand_in`: they stand for public addresses (a
    test's name table), so the address check passes them."""

    addresses: tuple[str, ...]
    stand_in: bool = False


class ResolveError(Exception):
    """The name could not be resolved (the reason is the message)."""


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> Resolved:
        """The addresses of `host`; raises `ResolveError`."""
        ...


class SystemResolver:
    """The host's own resolver (`getaddrinfo`), at most `limit` addresses kept."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit

    async def resolve(self, host: str, port: int) -> Resolved:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ResolveError(f"cannot resolve {host}: {exc.strerror or exc}") from None
        seen: dict[str, None] = {}
        for family, _, _, _, addr in infos:
            if family in (socket.AF_INET, socket.AF_INET6):
                seen[str(addr[0]).split("%", 1)[0]] = None
        if not seen:
            raise ResolveError(f"{host} has no IPv4 or IPv6 address")
        return Resolved(tuple(seen)[: self.limit])


class NameTable:
    """A test's resolver: `public` names answer addresses standing in for public ones (the
    address check lets them through), `other` names answer addresses checked as real ones;
    any other name does not resolve. Nothing is asked of the host's resolver."""

    def __init__(
        self,
        public: Mapping[str, str | Sequence[str]] | None = None,
        other: Mapping[str, str | Sequence[str]] | None = None,
    ) -> None:
        self.public = {k.lower(): _list(v) for k, v in (public or {}).items()}
        self.other = {k.lower(): _list(v) for k, v in (other or {}).items()}
        self.asked: list[str] = []
        """Every name asked, in order."""

    async def resolve(self, host: str, port: int) -> Resolved:
        name = host.lower().rstrip(".")
        self.asked.append(name)
        await anyio.lowlevel.checkpoint()
        if name in self.public:
            return Resolved(self.public[name], stand_in=True)
        if name in self.other:
            return Resolved(self.other[name])
        raise ResolveError(f"cannot resolve {host}: no such name")


def _list(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def parse_address(text: str) -> IPAddress:
    ip = ipaddress.ip_address(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def forbidden(address: str, own: frozenset[str]) -> str | None:
    """Why the proxy never relays to `address` (an IP, as resolved), or `None` when it may;
    `own`: this host's own addresses (`own_addresses`)."""
    try:
        ip = parse_address(address)
    except ValueError:
        return f"{address} is not an IP address"
    if ip.is_loopback:
        return f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is a link-local address"
    if ip.is_unspecified:
        return f"{ip} is the unspecified address"
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip == ipaddress.IPv4Address("255.255.255.255"):
        return f"{ip} is the broadcast address"
    if str(ip) in own:
        return f"{ip} is an address of this host"
    return None


def own_addresses() -> frozenset[str]:
    """The addresses of this host's interfaces (a relay to one reaches the host's own
    services, which a loopback check alone would miss)."""
    import psutil

    found: set[str] = set()
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                text = addr.address.split("%", 1)[0]
                try:
                    found.add(str(parse_address(text)))
                except ValueError:
                    continue
    return frozenset(found)


__all__ = [
    "NameTable",
    "ResolveError",
    "Resolved",
    "Resolver",
    "SystemResolver",
    "forbidden",
    "own_addresses",
    "parse_address",
]
