"""One run request, one shape: the `RunSpec`.

Every way a run starts builds one — `Supervisor.start` / `run` (their keywords are the spec's
fields), a continuable agent's first child and each cold resume, a delegation's task, verifier
and fix runs, an orchestrator, `tether mcp`, `RayPlacement.start`, `tether run` and `tether
agents send` — and hands it to the one planning step (`plan.py`), which is the only place a
bad request is found. A spec is frozen: a variant is `spec.replace(field=...)`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.parent.models import ModelProvider
from tether.parent.process.config import ChildConfig
from tether.parent.process.limits import Limits
from tether.parent.run.broker import ApprovePolicy, Broker, ParentTool, TurnHook
from tether.parent.run.budget import Budget
from tether.parent.run.events import EventCallback
from tether.parent.run.provider import Provider
from tether.parent.trace.spec import TraceOption
from tether.protocol.messages import AgentDefinition, ChatMessage, RunResult

ReportHook = Callable[[str], Awaitable[None]]
"""Told of each `report` event's text, in order, before the child's later messages are read."""


@dataclass(frozen=True)
class Continuation:
    """Makes a run continuable: the child keeps the run (`continuable: true`) and is kept alive
    after each answer for `keep_alive` seconds, for a follow-up (`RunHandle.message`)."""

    keep_alive: float
    on_report: ReportHook | None = None

    def __post_init__(self) -> None:
        if not self.keep_alive >= 0:
            raise ValueError("keep_alive must be zero or more seconds")


@dataclass(frozen=True)
class NamedModel:
    """A model provider together with the model string it was built from: runs that share one
    provider object (an orchestrator and its sub-agents share a scripted model's turns) still
    know the name, which is what a continuable agent stores for a cold resume and what the
    ledger bills."""

    name: str
    provider: ModelProvider


class ForkSource(Protocol):
    """A run whose completed turns a `fork` starts from (a `RunHandle`)."""

    @property
    def broker(self) -> Broker: ...


ModelSpec = str | ModelProvider | NamedModel | None
Chooser = Callable[[Sequence[RunResult]], int | None]
"""`choose(results)`: the index of the attempt to take, or `None` for none."""


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything one run needs. Only `prompt` is required; see `Supervisor.start` for what each
    field means to a run (the keyword arguments there are these fields)."""

    prompt: str
    agent: str | AgentDefinition = "general"
    """A role name, an `AgentDefinition`, or `module:callable` / `file.py:callable` for your own
    agent implementation hosted by tether's child."""
    workspace: str | os.PathLike[str] = "."
    model: ModelSpec = None
    """A model string (`scripted:FILE`, `openai:MODEL`, ...), a provider object, or a
    `NamedModel`; the caller's model wins over the definition's."""
    limits: Limits | None = None
    config: ChildConfig | None = None
    """How the child is started and taken down (default: the supervisor's)."""
    command: Sequence[str] | None = None
    """Drive this command (any protocol-speaking child) instead of tether's own child."""
    provider: str | Provider | None = None
    """What runs it: a provider name of the supervisor (`NAME` or `NAME:ARGUMENT`) or a
    `Provider`; default `spawn`, or `command` when `command` is given."""
    description: str = ""
    run_id: str | None = None
    parent_tools: Sequence[ParentTool] = ()
    """Tools this parent serves for the run itself (`tool/call`), beside the child's own."""
    history: Sequence[ChatMessage] = ()
    """A transcript the run starts from."""
    fork_from: ForkSource | None = None
    """The run whose completed turns a `fork` starts from."""
    continuation: Continuation | None = None
    """Keep the child after it answers, for follow-ups."""
    budgets: Sequence[Budget] = ()
    """Token budgets this run shares with others (a delegation tree's): every model turn is
    reserved against each of them too."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Free-form names the caller gives the run (a task's tool call id, an agent id); carried
    on the run handle, never sent to the child."""
    approve: ApprovePolicy | None = None
    on_event: EventCallback | None = None
    on_turn: TurnHook | None = None
    """Told of every model turn the parent brokers for the run, before the child gets it."""
    workspace_mode: str = "shared"
    """`shared` (the child works in the workspace) or `layered`: the child sees the workspace
    through a copy-on-write layer of its own, and its changes come back as the result's change
    set (`RunResult.changes`), applied according to `apply`."""
    apply: str = "never"
    """When a layered run's change set is applied to the workspace: `never` (returned only;
    `Supervisor.apply(result)` or `tether apply` applies it later, `Supervisor.discard`
    throws it away), `on_success` (when the run succeeded). A delegation also knows
    `on_verified` (after its verifier's PASS)."""
    layer: str | None = None
    """Run in the kept layer of an earlier layered run (its `changes.layer`) instead of a new
    one: a fix in the same layer, or, with a read-only agent, a read-only view of it (a
    verifier's). The layer stays the supervisor's."""
    attempts: int = 1
    """Run the task this many times at once, each in its own layer (`Supervisor.run` only):
    see `Supervisor.run`."""
    choose: Chooser | None = None
    """With `attempts`: picks the attempt to take from their results (its index, or `None`);
    default: the first that succeeded, in the order they finished."""
    trace: TraceOption = None
    """Trace the run: a directory (one JSON Lines file per run, named by its run id) or a
    `TraceSpec`; `None`: the supervisor's `trace=`, if it has one (docs/traces.md)."""
    parent_run: str | None = None
    """The run that started this one (an orchestrator's, for its sub-agents), named in the
    trace's header."""

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str):
            raise ValueError(f"the prompt must be a string, not {type(self.prompt).__name__}")
        set_ = object.__setattr__
        set_(self, "parent_tools", tuple(self.parent_tools))
        set_(self, "history", tuple(self.history))
        set_(self, "budgets", tuple(self.budgets))
        set_(self, "labels", dict(self.labels))
        if self.command is not None:
            set_(self, "command", tuple(self.command))

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)


def spec_of(spec: RunSpec | str | None, fields: Mapping[str, Any]) -> RunSpec:
    """The spec a keyword call means: `start("prompt", agent=...)`, `start(prompt=...)` or
    `start(spec, model=...)`. An unknown keyword is bad usage (`ValueError` naming it)."""
    known = {f.name for f in dataclasses.fields(RunSpec)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"unknown run field(s): {', '.join(unknown)}; a run takes {', '.join(sorted(known))}"
        )
    if isinstance(spec, RunSpec):
        return spec.replace(**fields) if fields else spec
    if spec is None:
        if "prompt" not in fields:
            raise ValueError("a run needs a prompt")
        return RunSpec(**fields)
    return RunSpec(prompt=spec, **fields)
