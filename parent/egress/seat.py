"""One run's network, wired to its child: the proxy, the CA, the trust file, the environment.

Theory of operation
-------------------
A run whose policy is not `none` gets a `RunEgress` for the life of its child (`open()`, an
async context the run holds around the spawn): the run's `EgressProxy` (its own task group,
its own listeners, its own limits), and, when the policy carries a credential, the run's CA
(`tls.RunCA`) and a directory of the parent's holding the certificates the child trusts (the
host's bundle, or `EgressOptions.child_trust`, and the run's CA) — certificates only, granted
to the child read-only (`read_paths`). The credentials' values are read from the parent's own
environment when the run starts and live in the proxy alone.

Where the child reaches the proxy is the caller's to arrange (`private_network.py`): a
listener the sandbox made in the child's private namespace, handed to `serve()`, or a loopback
port of the run's own (`listen_loopback()`). `child_env(port)` is what the child's environment
gets for a proxy at 127.0.0.1:`port`: the proxy variables every HTTP client reads (upper and
lower case: libcurl, hence git, reads `http_proxy` in lower case only), pip's and npm's own,
`NO_PROXY` empty (a foreign agent's: loopback, where its model gateway lives), and with a
credential the trust file for OpenSSL, requests, curl, pip, Node and git.

When the context ends (the child is gone), the proxy is revoked — its listeners closed, every
connection cut, a late request refused — the CA's keys dropped, and the directory removed.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from tether.parent.egress.addresses import Resolver
from tether.parent.egress.policy import NetworkPolicy
from tether.parent.egress.proxy import EgressProxy, NetEvent, ProxyLimits, Traffic

PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "PIP_PROXY",
    "npm_config_proxy",
    "npm_config_https_proxy",
)
"""Each is set to the run's proxy URL."""
LOOPBACK = ("127.0.0.1", "localhost")
"""What a foreign agent reaches without the proxy: its model gateway."""
TRUST_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "npm_config_cafile",
)
"""Each points at the trust file, when the run's policy carries a credential."""
TRUST_FILE = "trust.pem"


@dataclass(frozen=True)
class EgressOptions:
    """How a supervisor's egress proxies reach the world. The defaults are the host's: its
    resolver, its trusted CAs. A test gives a name table and a CA of its own instead."""

    resolver: Resolver | None = None
    upstream: ssl.SSLContext | None = None
    """How the proxy verifies the servers of credential destinations (default: the system's
    trust, `ssl.create_default_context()`)."""
    child_trust: bytes | None = None
    """PEM certificates the child trusts besides the run's CA when its policy carries a
    credential (default: the host's bundle)."""
    limits: ProxyLimits = field(default_factory=ProxyLimits)


class CredentialMissing(ValueError):
    """A credential's variable is not set in the parent's environment (bad usage)."""


def read_secrets(policy: NetworkPolicy, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The value of each credential's variable; raises `CredentialMissing` naming one that is
    not set (or empty) or holds a line break."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for credential in policy.credentials():
        value = env.get(credential.env, "")
        if not value:
            raise CredentialMissing(
                f"the network credential ${credential.env} is not set in the parent's environment"
            )
        if any(c in value for c in "\r\n\0"):
            raise CredentialMissing(f"the network credential ${credential.env} holds a line break")
        out[credential.env] = value
    return out


class RunEgress:
    """See the module docstring; made by `open()`."""

    def __init__(self, proxy: EgressProxy, trust_dir: str | None) -> None:
        self.proxy = proxy
        self.trust_dir = trust_dir

    @property
    def policy(self) -> NetworkPolicy:
        return self.proxy.policy

    @property
    def traffic(self) -> Traffic:
        return self.proxy.traffic

    @property
    def trust_file(self) -> str | None:
        return os.path.join(self.trust_dir, TRUST_FILE) if self.trust_dir else None

    @property
    def read_paths(self) -> tuple[str, ...]:
        """What the sandbox must let the child read (the trust directory)."""
        return (self.trust_dir,) if self.trust_dir else ()

    async def serve(self, sock: socket.socket) -> int:
        """Serve a listening socket made for this run (the child's namespace's)."""
        return await self.proxy.serve(sock)

    async def listen_loopback(self) -> int:
        return await self.proxy.listen_loopback()

    def child_env(self, port: int, direct: Sequence[str] = ()) -> dict[str, str]:
        """The variables that send the child's HTTP clients through the proxy at
        127.0.0.1:`port` (see the module docstring); `direct`: hosts they reach without it
        (`NO_PROXY`: a foreign agent's model gateway on loopback), none by default, so that
        even an explicitly listed loopback destination goes through the proxy."""
        url = f"http://127.0.0.1:{port}"
        env = dict.fromkeys(PROXY_VARIABLES, url)
        env["NO_PROXY"] = env["no_proxy"] = ",".join(direct)
        trust = self.trust_file
        if trust is not None:
            env.update(dict.fromkeys(TRUST_VARIABLES, trust))
        return env


@asynccontextmanager
async def open_egress(
    run_id: str,
    policy: NetworkPolicy,
    options: EgressOptions | None = None,
    *,
    on_event: Callable[[NetEvent], None] | None = None,
    on_limit: Callable[[str], None] | None = None,
) -> AsyncIterator[RunEgress]:
    """The run's egress for as long as the context lasts (see the module docstring); raises
    `CredentialMissing` before anything starts."""
    opts = options or EgressOptions()
    secrets = read_secrets(policy)
    ca = None
    trust_dir = None
    try:
        if secrets:
            from tether.parent.egress.tls import RunCA, system_bundle

            ca = RunCA(run_id, policy.credential_hosts())
            base = opts.child_trust if opts.child_trust is not None else system_bundle()
            trust_dir = _trust_dir(base + b"\n" + ca.cert_pem)
        proxy = EgressProxy(
            run_id,
            policy,
            resolver=opts.resolver,
            upstream=opts.upstream,
            secrets=secrets,
            ca=ca,
            on_event=on_event,
            on_limit=on_limit,
            limits=opts.limits,
        )
        secrets = {}
        async with proxy:
            yield RunEgress(proxy, trust_dir)
    finally:
        if trust_dir is not None:
            shutil.rmtree(trust_dir, ignore_errors=True)
        if ca is not None:
            ca.forget()


def _trust_dir(pem: bytes) -> str:
    """A directory of the parent's holding `pem` as the trust file, readable by the sandbox's
    uid (certificates only)."""
    path = tempfile.mkdtemp(prefix="tether-egress-")
    os.chmod(path, 0o755)
    with open(os.path.join(path, TRUST_FILE), "wb") as f:
        f.write(pem)
    os.chmod(os.path.join(path, TRUST_FILE), 0o644)
    return path


__all__ = ["CredentialMissing", "EgressOptions", "RunEgress", "open_egress", "read_secrets"]
