"""A run's network: its egress proxy around its child's life, and what the result says of it.

A run whose network policy allows anything holds its egress proxy for its child's whole life
(`held`: `tether.parent.egress.seat`). Tether's own child reaches the proxy through a listener
its sandbox makes in a private network namespace (root; `wire`, then `attach` once the child
is spawned), else through a loopback port of the run's own, which the sandbox lets it connect
to alone (no root) or merely offers (process level); a provider's child is wired by the
provider (`SubagentRun.egress`). The proxy's decisions go out as `NetEvent`s through the run's
`on_event`; a byte limit it reaches calls the run's `on_limit`, which ends the activation in
progress as `net_limit`; and every result says what the proxy did (`report`, the result's
`isolation.network`). A run whose policy allows nothing has no proxy: all of this is a no-op.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Literal

from tether.parent.process.classify import Observed
from tether.parent.process.config import ChildConfig
from tether.parent.process.isolation import probe_host
from tether.parent.process.private_network import (
    Channel,
    PrivateNetwork,
    open_channel,
    receive_listeners,
)
from tether.parent.run.transport import ChildLink
from tether.protocol.messages import NetDenial, NetworkReport

if TYPE_CHECKING:
    from tether.parent.egress.events import NetEvent
    from tether.parent.egress.seat import EgressOptions, RunEgress

Enforced = Literal["namespace", "port", "none"]


class RunNetwork:
    """One run's egress proxy and how its child was kept to it (see the module docstring)."""

    def __init__(
        self,
        run_id: str,
        config: ChildConfig,
        level: str,
        *,
        on_event: Callable[[NetEvent], None],
        on_limit: Callable[[str], None],
    ) -> None:
        """`level`: the isolation level the run's child gets; `on_event`: each of the proxy's
        decisions; `on_limit(what)`: the proxy reached one of the run's network limits and cut
        everything."""
        self._run_id = run_id
        self._policy = config.network_policy
        self._level = level
        self._on_event = on_event
        self._on_limit = on_limit
        self.egress: RunEgress | None = None
        """The run's egress proxy, while its child lives, when its network policy allows
        anything (`tether.parent.egress`)."""
        self._enforced: Enforced | None = None

    @contextlib.asynccontextmanager
    async def held(self, observed: Observed, options: EgressOptions | None) -> AsyncIterator[None]:
        """The run's egress proxy around its child's life, when its policy allows anything
        (`options`: how the proxy reaches the world); a credential that went missing since the
        plan is a spawn failure."""
        policy = self._policy
        if policy.none:
            yield
            return
        from tether.parent.egress.seat import CredentialMissing, open_egress, read_secrets

        try:
            read_secrets(policy)
        except CredentialMissing as exc:
            observed.spawn_error = str(exc)
            yield
            return
        async with open_egress(
            self._run_id, policy, options, on_event=self._on_event, on_limit=self._on_limit
        ) as egress:
            self.egress = egress
            yield

    async def wire(
        self, cfg: ChildConfig
    ) -> tuple[ChildConfig, PrivateNetwork | None, Channel | None]:
        """Where tether's own child reaches the run's proxy (see the module docstring): the
        config with the proxy's variables and the trust directory, the private network its
        sandbox makes, and the channel its listener comes back on (root only). Only while
        `held` has a proxy."""
        egress = self.egress
        assert egress is not None
        channel: Channel | None = None
        network: PrivateNetwork | None = None
        if self._level == "sandbox" and probe_host().root:
            channel = open_channel(1)
            network = channel.network()
            port = channel.ports[0]
            self._enforced = "namespace"
        else:
            port = await egress.listen_loopback()
            if self._level == "sandbox":
                network = PrivateNetwork((port,))
                self._enforced = "port"
            else:
                self._enforced = "none"
        cfg = dataclasses.replace(
            cfg,
            env={**cfg.env, **egress.child_env(port)},
            read_paths=(*cfg.read_paths, *egress.read_paths),
        )
        return cfg, network, channel

    async def attach(self, channel: Channel, child: ChildLink, seconds: float) -> bool:
        """Serve the listener the child's sandbox made in its namespace; `False` (with why in
        the child's record) when none came within `seconds` (the handshake timeout)."""
        egress = self.egress
        assert egress is not None
        channel.spawned()
        got = await receive_listeners(channel.ours, 1, seconds)
        if got is None:
            if not child.exited():
                child.observed.handshake = seconds
            return False
        await egress.serve(got[0])
        return True

    def report(self) -> NetworkReport:
        """What the run's result says of its network."""
        policy = self._policy
        if policy.none:
            return NetworkReport()
        egress = self.egress
        if egress is None:
            return NetworkReport(policy="allowlist", allow=policy.describe())
        t = egress.traffic
        return NetworkReport(
            policy="allowlist",
            allow=policy.describe(),
            enforced=self._enforced or _enforced_by(self._level),
            allowed=t.allowed,
            denied=t.denied,
            bytes_up=t.bytes_up,
            bytes_down=t.bytes_down,
            denials=[NetDenial(host=h, port=p, reason=r) for h, p, r in t.denials],
            limits_hit=list(t.limits_hit),
        )


def _enforced_by(level: str) -> Enforced:
    """How a provider's own child was kept to the run's proxy (the `acp` provider wires it as
    the run does for tether's child)."""
    if level != "sandbox":
        return "none"
    return "namespace" if probe_host().root else "port"
