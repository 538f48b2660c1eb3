"""The child-transport seam: how a run obtains its child, and what it is handed.

Theory of operation
-------------------
A *transport* obtains one child for one run. `open(request, host)` is an async context: on
entering, it starts (or takes) a child and yields an `ObtainedChild` — the child as the run
drives it (`ChildLink`: the parent's endpoint and typed session over the child's byte streams,
the `Observed` record, and what the run needs to hold it still between activations and to tell
whether it is gone), plus how it was obtained (its pid, the command, the spawner); on leaving,
it takes the child down and fills in `observed` with what the end was (exit status, signal,
dispose rung, stderr tail), from which the run's result is judged. A child that cannot be
obtained is `SpawnError` on entering (the run ends `spawn_failed`), never anything else.

Everything else — the handshake, `agent/run` and follow-ups, the wall and idle clocks, cancel,
budgets, the result — is the run's (`tether.parent.run.handle`), the same whatever carried the
child. Two transports exist: `process` (`local.py`: a local process — spawn, containment,
keeper, the dispose ladder; the default) and `memory` (`memory.py`: tether's own child runtime
as a task of the run, over in-memory streams — no process at all). A child config names its
transport (`ChildConfig.transport`), the supervisor knows each by name (`sup.transports`); a
transport to a child elsewhere is one more class with this shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from tether.parent.process.classify import Observed
from tether.parent.process.config import ChildConfig
from tether.parent.process.host import Host
from tether.parent.process.isolation import Choice
from tether.parent.process.limits import Limits
from tether.parent.process.pool import WarmPool
from tether.parent.process.private_network import PrivateNetwork
from tether.parent.process.spawn import Spawner
from tether.parent.process.supervised import SupervisedProcess
from tether.parent.process.wired import NotificationHandler, RequestHandler
from tether.wire import Endpoint
from tether.wire.child_session import ChildSession


class ChildLink(Protocol):
    """A child as its run drives it, whatever carries it (`process.wired.WiredChild`)."""

    endpoint: Endpoint
    session: ChildSession
    observed: Observed
    ready: bool
    """It answered `initialize` (a pooled child already has)."""
    cut_off: bool
    """The run interrupted it: its take-down skips the polite `shutdown`."""
    held: str | None
    """How it is held still between activations (`None`: it runs)."""
    on_judged: Callable[[], Awaitable[None]] | None
    """Called, where the transport can, once the child's end is judged and `observed` holds it,
    before what it held is released (a run's result goes out then); else not at all."""

    def serve_with(self, on_request: RequestHandler, on_notification: NotificationHandler) -> None:
        """Route what the child asks to these handlers from now on."""
        ...

    def exited(self) -> bool:
        """Whether the child has ended (its process exited, its runtime returned)."""
        ...

    def stop_soon(self) -> None:
        """Begin to hold the child still without waiting (it has answered); `hold_still`
        finishes the hold and `resume()` undoes it."""
        ...

    async def hold_still(self) -> str:
        """Let nothing of the child run until `resume()`; how it is held."""
        ...

    def resume(self) -> None: ...

    def spawn_failure(self) -> str | None:
        """Why the child's command could not be started, seen after the fact (`None`)."""
        ...


@dataclass(frozen=True)
class ObtainedChild:
    """What a transport hands the run."""

    child: ChildLink
    pid: int | None
    """The child's own process (`None`: it has none)."""
    host_pid: int
    """The process the child runs in (`RunStarted.pid`): its own, or the supervisor's."""
    argv: tuple[str, ...]
    """The child's command, without a launcher's prefix (`RunStarted.argv`)."""
    spawner: str
    """How it was started: `exec`, `zygote` or `memory`."""
    fallback: str | None = None
    """Why the default spawner used exec rather than the zygote."""
    contained: bool = True
    """It is under the plan's containment tier (`False`: nothing contains it, and its result
    says `containment: "none"`)."""


@dataclass(frozen=True)
class ChildRequest:
    """What a transport is asked for: one child for one run."""

    config: ChildConfig
    limits: Limits
    tier: Host
    """The containment tier the child is to be under."""
    tag: str
    """A short name for the child's cgroup and logs (the run's number)."""
    workspace: str | None
    level: str
    """The isolation level the plan chose (`sandbox`, `process`, `none`)."""
    continuable: bool = False
    """The run keeps its child for follow-ups (so never a pooled one)."""
    layer: str | None = None
    """A layered run's layer directory: the child sees the workspace as an overlay of it (so
    never a pooled child; a transport that cannot layer refuses the run)."""
    workspace_read_only: bool = False
    """The child sees the workspace (or its layer) read only."""
    network: PrivateNetwork | None = None
    """The parent's listeners a sandboxed child may reach (a run's egress proxy), its channel
    passed into the child (so never a pooled child; a transport that cannot pass one refuses
    the run)."""


class Registrar(Protocol):
    """Who must know every live child process (the keeper and the exit hook)."""

    def register(self, child: SupervisedProcess) -> None: ...

    def unregister(self, child: SupervisedProcess) -> None: ...


class ProcessHost(Registrar, Protocol):
    """What a transport may use of the supervisor that owns the run: the warm pool, the
    spawner (exec, or the zygote), and the keeper's registration."""

    @property
    def pool(self) -> WarmPool | None: ...

    async def spawner(self, cfg: ChildConfig) -> Spawner | None: ...


class ChildTransport(Protocol):
    """A way to obtain a run's child (see the module docstring)."""

    name: str

    def check(self, config: ChildConfig) -> None:
        """Refuse a config this transport cannot carry (`ValueError`, bad usage, before
        anything starts)."""
        ...

    def isolation(self, config: ChildConfig, remote_launcher: str | None) -> Choice:
        """The isolation level a child of `config` gets (`ValueError` for one it cannot
        give). `remote_launcher`: the launcher runs the child elsewhere."""
        ...

    def open(
        self, request: ChildRequest, host: ProcessHost
    ) -> AbstractAsyncContextManager[ObtainedChild]:
        """Obtain the child (`SpawnError` when it cannot be); leaving takes it down."""
        ...
