"""A run's network policy: `none`, or an allowlist of destinations the run's egress proxy may
reach, some with a credential the proxy adds on the child's behalf.

Pure: no I/O, nothing resolved. `NetworkPolicy.decide(host, port)` is the whole rule the proxy
applies to a request's target before it resolves anything:

- a destination is `host[:ports]`: a DNS name (`pypi.org`), a wildcard for its subdomains
  (`*.example.com`: `a.example.com` and `a.b.example.com`, never `example.com` itself), or an
  IP literal (`10.0.0.5`, `[2001:db8::1]`); the ports are one (`:8443`), a list
  (`:80,443`), ranges (`:8000-8100`) or both, and 443 when none is given. The port is checked
  as well as the host: an allowed name's other ports are refused;
- a target that is an IP literal passes only when that literal is listed (a name never
  allows the addresses it resolves to, and a wildcard never matches a literal);
- a policy may lie `within` another (a sub-agent's within its orchestration's): a target
  must pass both, so the inner one can only narrow;
- a destination may carry a `Credential`: a header (`Authorization: Bearer …` by default)
  whose value the parent reads from one of its own environment variables. The policy holds
  the variable's name, never the value.

Host names are compared in lower case without a trailing dot; a host that is not ASCII (an
unencoded IDN) is refused rather than guessed at: tools send the punycode form.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_PORT = 443
"""The port of a destination that names none."""
DEFAULT_MAX_CONNECTIONS = 32
DEFAULT_MAX_BYTES_UP = 256 * 1024 * 1024
DEFAULT_MAX_BYTES_DOWN = 4 * 1024 * 1024 * 1024

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
_FORBIDDEN_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"}
)
"""Headers a credential may not set: they frame or route the request, not authorize it."""


@dataclass(frozen=True)
class Credential:
    """A header the proxy adds to every request to a destination (replacing one the child
    sent), its value `prefix` + the parent's environment variable `env`. The child never
    sees it: the proxy terminates TLS for that destination only (with the run's own CA)."""

    env: str
    header: str = "Authorization"
    prefix: str = "Bearer "

    def __post_init__(self) -> None:
        if not _ENV_NAME.match(self.env):
            raise ValueError(f"credential variable {self.env!r}: expected a variable name")
        if not _HEADER_NAME.match(self.header):
            raise ValueError(f"credential header {self.header!r}: expected a header name")
        if self.header.lower() in _FORBIDDEN_HEADERS or self.header.lower().startswith("proxy-"):
            raise ValueError(f"credential header {self.header!r} cannot carry a credential")
        if any(c in self.prefix for c in "\r\n\0"):
            raise ValueError("a credential's prefix may not hold line breaks")

    def describe(self) -> str:
        return f"{self.header}: {self.prefix}${self.env}"


PortRange = tuple[int, int]


@dataclass(frozen=True)
class Destination:
    """One allowlist entry (see the module docstring); build it with `parse_destination`."""

    host: str
    """Lower case: a name, `*.` and a name, or an IP literal (IPv6 without brackets)."""
    ports: tuple[PortRange, ...] = ((DEFAULT_PORT, DEFAULT_PORT),)
    credential: Credential | None = None

    @property
    def wildcard(self) -> bool:
        return self.host.startswith("*.")

    @property
    def literal(self) -> bool:
        """The host is an IP literal."""
        return _ip(self.host) is not None

    def matches_host(self, host: str) -> bool:
        """`host` (normalized by `normalize_host`) is this entry's host or, for a wildcard, one
        of its subdomains; an IP literal matches only the same literal."""
        if self.wildcard:
            return _ip(host) is None and host.endswith(self.host[1:])
        return host == self.host

    def matches_port(self, port: int) -> bool:
        return any(low <= port <= high for low, high in self.ports)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{_ports_text(self.ports)}"

    def describe(self) -> str:
        """What a result and `tether doctor` show: the entry, and its credential's header and
        variable (never its value)."""
        if self.credential is None:
            return str(self)
        return f"{self} (adds {self.credential.describe()})"


def _ports_text(ports: Sequence[PortRange]) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ports)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)
def normalize_host(host: str) -> str:
    """`host` as the policy compares it: lower case, no trailing dot, brackets off an IPv6
    literal, an IP literal in its canonical form (cached: every request's host passes here).
    Raises `ValueError` for a host that is not a valid name or literal."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    ip = _ip(text)
    if ip is not None:
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ip)
    if not text.isascii():
        raise ValueError(f"{host!r} is not an ASCII host name (use its punycode form)")
    text = text.lower().rstrip(".")
    labels = text.split(".")
    if not text or len(text) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{host!r} is not a valid host name")
    if labels[-1].isdigit():
        raise ValueError(f"{host!r} is neither a host name nor an IP address")
    return text


def _parse_ports(text: str, entry: str) -> tuple[PortRange, ...]:
    ranges: list[PortRange] = []
    for part in text.split(","):
        low_text, dash, high_text = part.strip().partition("-")
        try:
            low = int(low_text)
            high = int(high_text) if dash else low
        except ValueError:
            raise ValueError(
                f"{entry!r}: ports must be numbers, a list (80,443) or a range (8000-8100)"
            ) from None
        if not 1 <= low <= high <= 65535:
            raise ValueError(f"{entry!r}: ports run from 1 to 65535, low to high")
        ranges.append((low, high))
    return tuple(sorted(set(ranges)))


def parse_destination(text: str, credential: Credential | None = None) -> Destination:
    """`host[:ports]` (see the module docstring) as a `Destination`; raises `ValueError`
    saying what is wrong."""
    entry = text.strip()
    if not entry:
        raise ValueError("an empty network destination")
    if entry.startswith("["):
        host_text, close, rest = entry[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r}: an IPv6 literal is written [ADDRESS] or [ADDRESS]:PORT")
        port_text = rest[1:] if rest else ""
        if _ip(host_text) is None:
            raise ValueError(f"{entry!r}: {host_text!r} is not an IPv6 address")
    elif entry.count(":") > 1:
        raise ValueError(f"{entry!r}: write an IPv6 literal in brackets, [ADDRESS]:PORT")
    else:
        host_text, colon, port_text = entry.partition(":")
        if colon and not port_text:
            raise ValueError(f"{entry!r}: a port after the colon")
    if "://" in entry or "/" in host_text:
        raise ValueError(f"{entry!r}: a destination is HOST[:PORT], not a URL")
    wildcard = host_text.startswith("*.")
    if "*" in (host_text[2:] if wildcard else host_text):
        raise ValueError(
            f"{entry!r}: a wildcard is '*.' before a domain (*.example.com), and only there"
        )
    host = normalize_host(host_text[2:] if wildcard else host_text)
    if wildcard:
        if _ip(host) is not None:
            raise ValueError(f"{entry!r}: a wildcard cannot cover IP addresses")
        if "." not in host:
            raise ValueError(f"{entry!r}: a wildcard needs a domain of two labels or more")
        host = "*." + host
    ports = _parse_ports(port_text, entry) if port_text else ((DEFAULT_PORT, DEFAULT_PORT),)
    return Destination(host, ports, credential)


@dataclass(frozen=True)
class Allowed:
    """A target the policy allows, and the credential the proxy adds for it, if any."""

    destination: Destination
    credential: Credential | None


@dataclass(frozen=True)
class Denied:
    reason: str


@dataclass(frozen=True)
class NetworkPolicy:
    """A run's network (see the module docstring). The empty allowlist is `none`: the default,
    no network at all. The limits bound what one run's proxy lets through and holds."""

    allow: tuple[Destination, ...] = ()
    within: NetworkPolicy | None = None
    """An outer policy every target must also pass (an orchestration's, for a sub-agent)."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Connections through the proxy at once; past it a new one is refused (503)."""
    max_bytes_up: int = DEFAULT_MAX_BYTES_UP
    """Bytes the run may send out in all; past it the run ends (`net_limit`)."""
    max_bytes_down: int = DEFAULT_MAX_BYTES_DOWN
    """Bytes the run may receive in all; past it the run ends (`net_limit`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow", tuple(self.allow))
        if min(self.max_connections, self.max_bytes_up, self.max_bytes_down) < 1:
            raise ValueError("a network policy's limits must be at least 1")

    @property
    def none(self) -> bool:
        """No network at all (nothing is allowed)."""
        return not self.allow or (self.within is not None and self.within.none)

    @property
    def name(self) -> str:
        """`none` or `allowlist`."""
        return "none" if self.none else "allowlist"

    def decide(self, host: str, port: int) -> Allowed | Denied:
        """Whether the proxy may relay to `host`:`port` (a name or an IP literal, as the
        request named it), and with which credential."""
        try:
            target = normalize_host(host)
        except ValueError as exc:
            return Denied(str(exc))
        if not 1 <= port <= 65535:
            return Denied(f"port {port} is not a TCP port")
        got = self._decide(target, port)
        if isinstance(got, Denied) or self.within is None:
            return got
        outer = self.within.decide(target, port)
        if isinstance(outer, Denied):
            return Denied(f"{outer.reason} (the orchestration's policy)")
        return Allowed(got.destination, got.credential or outer.credential)

    def _decide(self, target: str, port: int) -> Allowed | Denied:
        by_host = [d for d in self.allow if d.matches_host(target)]
        shown = f"[{target}]" if ":" in target else target
        if not by_host:
            if _ip(target) is not None:
                return Denied(f"{shown} is an IP address the network policy does not list")
            return Denied(f"{shown} is not in the network policy")
        for d in by_host:
            if d.matches_port(port):
                return Allowed(d, d.credential)
        ports = ",".join(_ports_text(d.ports) for d in by_host)
        return Denied(f"port {port} of {shown} is not allowed (the policy allows {ports})")

    def narrowed(self, entries: Iterable[str | Destination]) -> NetworkPolicy:
        """This policy as the outer bound of `entries` (a sub-agent's own list): a target
        must pass both. An empty `entries` is `none`."""
        inner = tuple(_entry(e) for e in entries)
        if not inner:
            return NONE
        return NetworkPolicy(
            inner,
            within=self if not self.none else NONE,
            max_connections=self.max_connections,
            max_bytes_up=self.max_bytes_up,
            max_bytes_down=self.max_bytes_down,
        )

    def credentials(self) -> list[Credential]:
        """Every credential the policy (and its outer bound) names, once each."""
        found: dict[Credential, None] = {}
        for policy in self._chain():
            for d in policy.allow:
                if d.credential is not None:
                    found[d.credential] = None
        return list(found)

    def _chain(self) -> list[NetworkPolicy]:
        out: list[NetworkPolicy] = []
        policy: NetworkPolicy | None = self
        while policy is not None:
            out.append(policy)
            policy = policy.within
        return out

    def credential_hosts(self) -> list[str]:
        """The hosts (patterns) a credential is bound to: the only names the run's CA may
        sign for."""
        return sorted({d.host for p in self._chain() for d in p.allow if d.credential})

    def describe(self) -> list[str]:
        """The allowlist as a result and `tether doctor` show it (`[]` for `none`)."""
        if self.none:
            return []
        own = [d.describe() for d in self.allow]
        if self.within is None:
            return own
        return [*own, *(f"within {line}" for line in self.within.describe())]


NONE = NetworkPolicy()
"""No network at all: the default."""


def _entry(value: str | Destination) -> Destination:
    return value if isinstance(value, Destination) else parse_destination(value)


def policy_of(value: object) -> NetworkPolicy:
    """A `NetworkPolicy` from what `ChildConfig(network=...)` accepts: `None` or `"none"`, a
    policy, or a sequence of destinations (`"host[:ports]"` strings or `Destination`s).
    Raises `ValueError`."""
    if value is None or value == "none":
        return NONE
    if isinstance(value, NetworkPolicy):
        return value
    if isinstance(value, str):
        raise ValueError(
            f"network {value!r}: expected 'none' or a list of destinations (['pypi.org'])"
        )
    if isinstance(value, Iterable):
        return NetworkPolicy(tuple(_entry(_checked(v)) for v in value))
    raise ValueError(f"network: expected 'none' or a list of destinations, not {value!r}")


def _checked(value: object) -> str | Destination:
    if isinstance(value, str | Destination):
        return value
    raise ValueError(f"a network destination is 'host[:ports]', not {value!r}")


def destination_from_table(table: Mapping[str, Any]) -> Destination:
    """A definitions file's table form of an entry: `{allow = "host[:ports]"}` with an optional
    credential: `credentialEnv`, `credentialHeader` (default Authorization),
    `credentialPrefix` (default "Bearer "). Raises `ValueError`."""
    known = {"allow", "credentialEnv", "credentialHeader", "credentialPrefix"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in a network entry; expected {sorted(known)}")
    allow = table.get("allow")
    if not isinstance(allow, str):
        raise ValueError("a network entry's table needs allow = 'host[:ports]'")
    env = table.get("credentialEnv")
    credential = None
    if env is not None:
        header = table.get("credentialHeader", "Authorization")
        prefix = table.get("credentialPrefix", "Bearer " if header == "Authorization" else "")
        if not all(isinstance(v, str) for v in (env, header, prefix)):
            raise ValueError("a network entry's credential keys are strings")
        credential = Credential(env=env, header=header, prefix=prefix)
    elif "credentialHeader" in table or "credentialPrefix" in table:
        raise ValueError("a network entry's credentialHeader needs credentialEnv")
    return parse_destination(allow, credential)


def credential_flag(text: str) -> tuple[str, Credential]:
    """`--net-credential HOST[:PORT]=[HEADER:]ENV`: the destination text and its credential
    (`Authorization: Bearer $ENV` without a header; the variable's value alone with one)."""
    dest, eq, rest = text.rpartition("=")
    if not eq or not dest or not rest:
        raise ValueError(f"{text!r}: expected HOST[:PORT]=ENV or HOST[:PORT]=HEADER:ENV")
    header, colon, env = rest.rpartition(":")
    if colon:
        return dest, Credential(env=env, header=header, prefix="")
    return dest, Credential(env=rest)


def with_credentials(
    entries: Sequence[str], credentials: Sequence[tuple[str, Credential]]
) -> tuple[Destination, ...]:
    """The allowlist of `--allow-net` entries and `--net-credential` pairs: a credential's
    destination is added when it is not listed already, else attached to the entry that
    names the same host and ports."""
    out = [parse_destination(e) for e in entries]
    for text, credential in credentials:
        dest = parse_destination(text, credential)
        for i, known in enumerate(out):
            if (known.host, known.ports) == (dest.host, dest.ports):
                if known.credential is not None and known.credential != credential:
                    raise ValueError(f"{text!r} is given two credentials")
                out[i] = dest
                break
        else:
            out.append(dest)
    return tuple(out)


__all__ = [
    "DEFAULT_PORT",
    "NONE",
    "Allowed",
    "Credential",
    "Denied",
    "Destination",
    "NetworkPolicy",
    "credential_flag",
    "destination_from_table",
    "normalize_host",
    "parse_destination",
    "policy_of",
    "with_credentials",
]
