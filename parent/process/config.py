"""How children are started and taken down: `ChildConfig`, and the warm pool's `PoolSpec`."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.parent.egress.policy import NONE, Destination, NetworkPolicy, policy_of
from tether.parent.process.host import Host
from tether.parent.process.launchers import Launcher
from tether.parent.process.layers import LayerLimits
from tether.parent.process.limits import DisposePolicy, Limits
from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES

DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-I", "-m", "tether.child")


@dataclass(frozen=True)
class ChildConfig:
    """How children are started and taken down; one per supervisor, overridable per run."""

    command: Sequence[str] = DEFAULT_COMMAND
    pass_env: Sequence[str] = ()
    """Names or globs of parent variables the child may inherit beyond the allowlist."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Explicit values merged over the scrubbed environment."""
    handshake_timeout: float = 10.0
    dispose: DisposePolicy = field(default_factory=DisposePolicy)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    stderr_ring_bytes: int = 64 * 1024
    cancel_grace: float = 2.0
    """After `agent/cancel`, how long the child has to answer `aborted` itself."""
    containment: str = "auto"
    """The containment tier: `auto` (the most complete this host offers), `cgroup2`, `hybrid`,
    `cgroup1` or `process-group`. A tier this host does not offer is refused at `start()`."""
    launcher: str | Launcher = "local"
    """An argv prefix the command runs under (`local`, `bwrap`, `ssh:HOST`, `docker:IMAGE`,
    ..., or a `Launcher`); see `launchers.py` for what each provides."""
    spawner: str = "auto"
    """How a child process starts: `auto` (the default: `zygote` for tether's own child —
    the default command, optionally with a custom agent, under the local launcher — and
    `exec` for anything else, or when the zygote cannot serve a run, which the run's
    `RunStarted` then says), `exec` (a fresh interpreter through the trampoline) or `zygote`
    (forked from a per-supervisor process that already imported the child runtime, with the
    same containment, sandbox included; see `zygote.py`; refused for any other command or
    launcher)."""
    isolation: str = "auto"
    """`sandbox`, `process`, or `auto` (the strongest this host supports); see
    `isolation.py` and docs/containment.md. `sandbox` on a host that cannot provide it is
    refused at `start()`."""
    sandbox_user: tuple[int, int] | None = None
    """(uid, gid) sandboxed children run as when the supervisor is root; `None`: tether's
    dedicated default (`tether.contain.plan.DEFAULT_SANDBOX_ID`)."""
    read_paths: Sequence[str] = ()
    """More paths a sandboxed child may read (and execute), beyond what it is granted."""
    transport: str = "process"
    """How a run obtains its child (`tether.parent.run.transport`): `process` (a local process:
    the launcher, containment, sandbox, limits, keeper and dispose ladder above) or `memory`
    (tether's own child runtime as a task of the supervisor, over in-memory streams: no
    process, no isolation, no resource limits — the run's clocks, budgets and the tools'
    workspace confinement only; for tests and trusted work, the `inprocess` provider's). A
    supervisor whose children all run in memory starts no process at all. `command` children
    are processes whatever this says."""
    deny_paths: Sequence[str] = ()
    """Directories a sandboxed child must never reach, whatever else it is granted (the
    session store's, for the runs of continuable agents). Under a root supervisor's private
    mounts each is covered by an empty read-only mount; where the sandbox cannot cover one a
    grant reaches (no private mounts, a launcher), the run is refused when it is planned."""
    allow_git_config: bool = False
    """Let a sandboxed child write the workspace's `.git/config` and `.git/hooks` (and its
    submodules'), which the sandbox refuses by default: git runs what they name on the user's
    next `git status` or `git checkout`, outside every sandbox. Ordinary git use (`init`,
    `add`, `commit`, `branch`, `checkout`) needs no opt-in; `git config`, `git remote add`
    and `git submodule add` do. Changes there are listed in `sensitiveChanges` either way."""
    layers_dir: str | None = None
    """Where layered runs' layers are made (`workspace_mode="layered"`); `None`:
    `$TMPDIR/tether-layers-UID`. Never inside a workspace."""
    layer_limits: LayerLimits = field(default_factory=LayerLimits)
    """Bounds on a layer's copy and on its change set (`LayerLimits`)."""
    network: NetworkPolicy | Sequence[str | Destination] | str | None = NONE
    """The run's network: `"none"` (the default: no network at all), or an allowlist of
    destinations (`["pypi.org", "*.example.com:80,443", "10.0.0.5:8080"]`, or a
    `NetworkPolicy` with limits and credentials) reached through the run's egress proxy in the
    parent (`tether.parent.egress`); stored as a `NetworkPolicy` (`network_policy`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "network", policy_of(self.network))

    @property
    def network_policy(self) -> NetworkPolicy:
        """`network`, as the `NetworkPolicy` it was made into."""
        assert isinstance(self.network, NetworkPolicy)
        return self.network


@dataclass(frozen=True)
class PoolSpec:
    """Keep `size` initialized children ready for runs (`Supervisor(pool=PoolSpec(2))`).

    A run whose settings match the pool's (the child config's command, environment, containment,
    launcher and message cap, and the limits a child is spawned under: memory, cpu, processes,
    open files, file size) takes a ready child, its handshake already done; any other run
    spawns cold. Wall and idle limits are the run's own and start when it takes the child.
    A child serves one run only. Only the local launcher can be pooled (other launchers build
    their argv around the run's workspace)."""

    size: int
    limits: Limits = field(default_factory=Limits)
    config: ChildConfig | None = None
    """The children's config; `None`: the supervisor's."""
    workspace: str | os.PathLike[str] | None = None
    """The workspace the pool's children are sandboxed for (a sandboxed child is confined to
    one workspace from its first instruction, so only runs in this workspace take one).
    Required when the pool's isolation level is `sandbox`."""


def pool_key(
    cfg: ChildConfig, limits: Limits, tier: Host, level: str, workspace: str | None
) -> tuple[Any, ...]:
    """What a child is spawned with; runs that agree on it can share a pool."""
    return (
        level,
        workspace if level == "sandbox" else None,
        cfg.sandbox_user,
        tuple(cfg.read_paths),
        tuple(cfg.deny_paths),
        cfg.allow_git_config,
        tuple(cfg.network_policy.describe()),
        tuple(cfg.command),
        tuple(cfg.pass_env),
        tuple(sorted(cfg.env.items())),
        tier.tier,
        cfg.launcher if isinstance(cfg.launcher, str) else id(cfg.launcher),
        cfg.max_message_bytes,
        cfg.stderr_ring_bytes,
        cfg.spawner,
        dataclasses.replace(limits, wall=None, idle=None),
    )
