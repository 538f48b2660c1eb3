"""TLS for the egress proxy: the per-run certificate authority, and reading the server name a
client's TLS hello asks for.

`RunCA` exists only for a run whose policy carries a credential, and only in the parent: its
private key is a `cryptography` object in the supervisor's memory (non-dumpable) and is never
written anywhere; the child gets its certificate alone, to trust. The CA is constrained to
the credential destinations' names (an X.509 name constraint, critical), so even a
certificate it signed for any other name would not verify. For each such destination the
proxy terminates the child's TLS with a leaf certificate of that CA (made on first use, one key
per run) and re-encrypts to the real server with ordinary verification. A leaf's certificate
and key reach OpenSSL through an anonymous in-memory file (`memfd`), read and closed at once.

`client_hello_server_name` reads the SNI of a ClientHello from the first bytes a client sends
in a tunnel, so the proxy can refuse a tunnel whose TLS names another host than its
`CONNECT` did. It never needs more than one TLS record (at most 16 KiB + 5).

`cryptography` is imported when a run's CA is made: a supervisor whose runs carry no
credential never loads it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from collections.abc import Sequence
from typing import Any

MAX_HELLO = 16 * 1024 + 5
"""The most bytes a ClientHello's record takes (a record is at most 2^14 bytes of payload)."""
LEAF_CACHE = 64
"""Leaf certificates (server contexts) a run keeps (one per credential host it met)."""
VALID = dt.timedelta(days=30)


class NeedMore:
    """`client_hello_server_name`: the record is not whole yet."""


NEED_MORE = NeedMore()


def client_hello_server_name(data: bytes) -> str | NeedMore | None:
    """The server name (SNI) of the TLS ClientHello that `data` begins with: the name in
    lower case; `None` when `data` is no ClientHello or names no server; `NEED_MORE` while the
    first record is incomplete. Never raises."""
    if len(data) < 5:
        return NEED_MORE if data[:1] in (b"", b"\x16") else None
    if data[0] != 0x16 or data[1] != 0x03:
        return None
    length = int.from_bytes(data[3:5], "big")
    if length > MAX_HELLO - 5:
        return None
    if len(data) < 5 + length:
        return NEED_MORE
    try:
        return _sni(data[5 : 5 + length])
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def _sni(body: bytes) -> str | None:
    if body[0] != 0x01:  # handshake type: client_hello
        return None
    size = int.from_bytes(body[1:4], "big")
    hello = body[4 : 4 + size]
    if len(hello) < size:
        return None  # a hello split over records: not read (no client does this for SNI)
    at = 2 + 32  # version, random
    at += 1 + hello[at]  # session id
    at += 2 + int.from_bytes(hello[at : at + 2], "big")  # cipher suites
    at += 1 + hello[at]  # compression methods
    if at + 2 > len(hello):
        return None
    end = at + 2 + int.from_bytes(hello[at : at + 2], "big")
    at += 2
    while at + 4 <= min(end, len(hello)):
        kind = int.from_bytes(hello[at : at + 2], "big")
        ext_len = int.from_bytes(hello[at + 2 : at + 4], "big")
        ext = hello[at + 4 : at + 4 + ext_len]
        at += 4 + ext_len
        if kind != 0:
            continue
        names_end = 2 + int.from_bytes(ext[0:2], "big")
        i = 2
        while i + 3 <= names_end:
            name_type = ext[i]
            name_len = int.from_bytes(ext[i + 1 : i + 3], "big")
            name = ext[i + 3 : i + 3 + name_len]
            i += 3 + name_len
            if name_type == 0:
                return name.decode("ascii").lower().rstrip(".")
        return None
    return None


class RunCA:
    """One run's certificate authority (see the module docstring). `hosts`: the credential
    destinations (`api.example.com`, `*.example.com`, an IP literal), the only names it
    signs for."""

    def __init__(self, run_id: str, hosts: Sequence[str]) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.hosts = tuple(hosts)
        now = dt.datetime.now(dt.UTC)
        self._not_before = now - dt.timedelta(hours=1)
        self._not_after = now + VALID
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tether"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"tether run CA {run_id}"[:64]),
            ]
        )
        self._name = name
        dns: list[Any] = []
        ips: list[Any] = []
        for host in self.hosts:
            bare = host[2:] if host.startswith("*.") else host
            try:
                ip = ipaddress.ip_address(bare)
            except ValueError:
                dns.append(x509.DNSName(bare))
            else:
                ips.append(x509.IPAddress(ipaddress.ip_network(f"{ip}/{ip.max_prefixlen}")))
        public = self._key.public_key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        )
        if dns or ips:
            builder = builder.add_extension(
                x509.NameConstraints(permitted_subtrees=[*dns, *ips], excluded_subtrees=None),
                critical=True,
            )
        cert = builder.sign(self._key, hashes.SHA256())
        self.cert_pem: bytes = cert.public_bytes(serialization.Encoding.PEM)
        """The CA's certificate, what the child trusts (nothing secret)."""
        self._contexts: dict[str, ssl.SSLContext] = {}

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a leaf certificate for `host` signed by this CA
        (made once per host, at most `LEAF_CACHE` kept)."""
        got = self._contexts.get(host)
        if got is not None:
            return got
        pem = self._leaf_pem(host)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        fd = os.memfd_create("tether-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, pem)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        if len(self._contexts) >= LEAF_CACHE:
            self._contexts.pop(next(iter(self._contexts)))
        self._contexts[host] = ctx
        return ctx

    def _leaf_pem(self, host: str) -> bytes:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        try:
            alt: Any = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        public = self._leaf_key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        key = self._leaf_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cert.public_bytes(pem) + key

    def forget(self) -> None:
        """Drop the keys and contexts (the run is over)."""
        self._contexts.clear()
        self.__dict__.pop("_key", None)
        self.__dict__.pop("_leaf_key", None)


def system_bundle() -> bytes:
    """The host's own trusted certificates (what a child's TLS trusts without a policy)."""
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile):
        if path and os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError:
                continue
    return b""


__all__ = ["NEED_MORE", "NeedMore", "RunCA", "client_hello_server_name", "system_bundle"]
