"""How an agent's child is started: what this process was given (`Spec`, objects included),
what of it is stored for a cold resume in another process (`SpawnSettings`), and the way back.

Never stored: the child's `env` values (they may be secrets) and objects (a model provider, a
launcher object); `SpawnSettings.missing` names them, and whoever resumes the agent elsewhere
supplies them (a model, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tether.parent.agents.sessions import SpawnSettings
from tether.parent.models import ModelProvider
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.parent.process.limits import Limits, parse_duration
from tether.parent.run.broker import ApprovePolicy, ParentTool
from tether.parent.run.handle import EventCallback
from tether.protocol.messages import AgentDefinition

LIMIT_FIELDS = ("wall", "idle", "memory", "cpu", "processes", "open_files", "file_size")


def parse_keep_alive(value: float | str) -> float:
    """Seconds from `300`, `"5m"`, `"0"` (zero: dispose at once after each answer)."""
    if value in (0, "0", "0s"):
        return 0.0
    seconds = parse_duration(value, "keep_alive")
    assert seconds is not None
    return seconds


@dataclass
class Spec:
    """How this process starts the agent's child: what the spawn was given (objects too)."""

    definition: AgentDefinition
    workspace: str
    model: str | ModelProvider | None
    limits: Limits
    config: ChildConfig | None
    keep_alive: float
    token_total: int | None
    description: str = ""
    approve: ApprovePolicy | None = None
    on_event: EventCallback | None = None
    parent_tools: Sequence[ParentTool] = ()


def replace_model(spec: Spec, model: str | ModelProvider) -> Spec:
    return Spec(
        spec.definition,
        spec.workspace,
        model,
        spec.limits,
        spec.config,
        spec.keep_alive,
        spec.token_total,
        spec.description,
        spec.approve,
        spec.on_event,
        spec.parent_tools,
    )


def spec_from_stored(
    definition: AgentDefinition,
    workspace: str,
    settings: SpawnSettings | None,
    model: str | ModelProvider | None,
) -> Spec | str:
    """The spec of a cold resume in a process that did not spawn the agent, from what is
    stored (and `model`, which wins); else why it cannot be made (for a sentence "agent X ...").
    """
    stored = settings or SpawnSettings(missing=["model"])
    chosen: str | ModelProvider | None = model if model is not None else stored.model
    if chosen is None and definition.model is None:
        return (
            "was started with a model this process does not have; resume it with a model "
            "(model=..., or --model)"
        )
    config = ChildConfig(
        command=tuple(stored.command) or DEFAULT_COMMAND,
        pass_env=tuple(stored.pass_env),
        containment=stored.containment,
        launcher=stored.launcher,
        spawner=stored.spawner,
    )
    try:
        limits = Limits(**stored.limits)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        return f"has stored limits that are unusable here: {exc}"
    return Spec(
        definition,
        workspace or ".",
        chosen,
        limits,
        config,
        stored.keep_alive,
        stored.token_total,
        stored.description,
    )


def activation_budget(
    definition: AgentDefinition | None, total: int | None, used: int = 0
) -> int | None:
    """One activation's token budget: the definition's, within what is left of the total."""
    own = definition.token_budget if definition is not None else None
    if total is None:
        return own
    left = max(0, total - used)
    return left if own is None else min(own, left)


def stored_settings(spec: Spec, default: ChildConfig) -> SpawnSettings:
    """What of the spawn can be stored for a cold resume in another process."""
    cfg = spec.config or default
    missing: list[str] = []
    model: str | None = None
    if isinstance(spec.model, str):
        model = spec.model
        scheme, _, path = model.partition(":")
        if scheme == "scripted" and path:
            model = f"scripted:{Path(path).resolve()}"  # resumable from any directory
    elif spec.model is not None:
        missing.append("model")
    launcher = cfg.launcher if isinstance(cfg.launcher, str) else "local"
    if not isinstance(cfg.launcher, str):
        missing.append("launcher")
    if cfg.env:
        missing.append("env")
    limits = {
        name: getattr(spec.limits, name)
        for name in LIMIT_FIELDS
        if getattr(spec.limits, name) is not None
    }
    command = list(cfg.command)
    return SpawnSettings(
        model=model,
        limits=limits,
        command=[] if tuple(command) == DEFAULT_COMMAND else command,
        launcher=launcher,
        containment=cfg.containment,
        spawner=cfg.spawner,
        pass_env=list(cfg.pass_env),
        keep_alive=spec.keep_alive,
        token_total=spec.token_total,
        description=spec.description,
        missing=missing,
    )
