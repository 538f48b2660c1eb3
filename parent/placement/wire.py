"""What crosses the engine between the driver and the node hosts.

Plain frozen dataclasses of tether's own types, pickled by the engine. Nothing here holds a
provider, a key or a callable: a node learns what to run (`NodeRun`), a run's stream carries
its child's model, approval and parent-tool requests (`Ask`) to the driver, whose answers
(`Answer`) go back to the host, and the hosts report what they are (`HostInfo`) and how they
took their children down (`HostReport`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.parent.process.config import ChildConfig
from tether.parent.process.limits import Limits
from tether.protocol.messages import AgentDefinition, ChatMessage, Rung, ToolSpec


@dataclass(frozen=True)
class NodeRun:
    """One run, as the driver hands it to a node's host."""

    run_id: str
    prompt: str
    agent: str | AgentDefinition
    """A definition whose model names were taken out (the driver picks models, see `relay`),
    or a custom agent spec (`module:callable`), checked on the node."""
    workspace: str
    description: str
    limits: Limits
    config: ChildConfig
    """The child config for the node: the caller's, with the placement's launcher."""
    history: tuple[ChatMessage, ...] = ()
    parent_tools: tuple[ToolSpec, ...] = ()
    models: bool = False
    """The driver has a model for this run: the node forwards `model/complete`."""
    approvals: bool = False
    """The driver has an approval policy: the node forwards `tool/approve`."""


@dataclass(frozen=True)
class Refused:
    """The node refused the run before spawning anything (bad usage it alone can see, such as
    a workspace that does not exist there)."""

    run_id: str
    message: str


@dataclass(frozen=True)
class Ask:
    """A request a node's child made that only the driver may answer."""

    id: int
    run_id: str
    method: str
    params: Any


@dataclass(frozen=True)
class Answer:
    id: int
    result: Any = None
    error: tuple[int, str] | None = None
    """A JSON-RPC error code and message for the child, instead of a result."""


@dataclass(frozen=True)
class HostInfo:
    node_id: str
    hostname: str
    ip: str
    pid: int
    tier: str
    """The containment tier `auto` picks on the node."""
    launcher: str
    sigchld_was_ignored: bool
    """The engine had set SIGCHLD to SIG_IGN in the host's process (reset on start)."""


@dataclass(frozen=True)
class DisposedRun:
    run_id: str
    pid: int | None
    kind: str | None
    rung: Rung | None
    message: str


@dataclass(frozen=True)
class HostReport:
    """What a host did when asked to close: each child it took down, and the rung needed."""

    node_id: str
    seconds: float
    runs: list[DisposedRun] = field(default_factory=list)
