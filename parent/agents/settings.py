"""How an agent's child is started: what this process was given (`AgentSpec`, objects included),
what of it is stored for a cold resume in another process (`SpawnSettings`), and the way back.

Never stored: the child's `env` values (they may be secrets) and objects (a model provider, a
launcher object); `SpawnSettings.missing` names them, and whoever resumes the agent elsewhere
supplies them (a model, say).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from tether.parent.agents.sessions import SpawnSettings
from tether.parent.models import absolute_model, unconfigured_base_url
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.parent.process.limits import Limits, parse_duration
from tether.parent.run.spec import ModelSpec, NamedModel, RunSpec
from tether.protocol.messages import AgentDefinition

LIMIT_FIELDS = ("wall", "idle", "memory", "cpu", "processes", "open_files", "file_size")


def parse_keep_alive(value: float | str) -> float:
    """Seconds from `300`, `"5m"`, `"0"` (zero: dispose at once after each answer)."""
    if value in (0, "0", "0s"):
        return 0.0
    seconds = parse_duration(value, "keep_alive")
    assert seconds is not None
    return seconds


@dataclass(frozen=True)
class AgentSpec:
    """How this process starts the agent's children: the run spec every child of the agent is
    made from (its prompt aside: each activation brings its own), the keep-alive and the total
    token budget of the session."""

    run: RunSpec
    keep_alive: float
    token_total: int | None

    @property
    def definition(self) -> AgentDefinition:
        agent = self.run.agent
        assert isinstance(agent, AgentDefinition)  # resolved when the agent was spawned
        return agent

    @property
    def workspace(self) -> str:
        return os.fspath(self.run.workspace)

    def with_model(self, model: ModelSpec) -> AgentSpec:
        return dataclasses.replace(self, run=self.run.replace(model=model))


def spec_from_stored(
    definition: AgentDefinition,
    workspace: str,
    settings: SpawnSettings | None,
    model: ModelSpec,
) -> AgentSpec | str:
    """The spec of a cold resume in a process that did not spawn the agent, from what is
    stored (and `model`, which wins); else why it cannot be made (for a sentence "agent X ...").
    """
    stored = settings or SpawnSettings(missing=["model"])
    chosen: ModelSpec = model if model is not None else stored.model
    if chosen is None and definition.model is None:
        return (
            "was started with a model this process does not have; resume it with a model "
            "(model=..., or --model)"
        )
    problem = stored_model_problem(definition, stored.model if model is None else None, model)
    if problem is not None:
        return problem
    config = ChildConfig(
        command=tuple(stored.command) or DEFAULT_COMMAND,
        pass_env=tuple(stored.pass_env),
        containment=stored.containment,
        launcher=stored.launcher,
        spawner=stored.spawner,
        transport=stored.transport,
    )
    try:
        limits = Limits(**stored.limits)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        return f"has stored limits that are unusable here: {exc}"
    run = RunSpec(
        prompt="",
        agent=definition,
        workspace=workspace or ".",
        model=chosen,
        limits=limits,
        config=config,
        description=stored.description,
    )
    return AgentSpec(run, stored.keep_alive, stored.token_total)


def stored_model_problem(
    definition: AgentDefinition, stored: str | None, given: ModelSpec
) -> str | None:
    """Why the model strings a cold resume would resolve from storage (the stored model, or
    the definition's when there is none; the definition's compaction model) are not ones this
    process would use on its own (`unconfigured_base_url`), for a sentence "agent X ..."; the
    caller's `given` model is theirs and never checked."""
    read: list[tuple[str, str | None]] = [("compaction model", definition.compaction_model)]
    if given is None:
        read.insert(0, ("model", stored if stored is not None else definition.model))
    for what, name in read:
        why = unconfigured_base_url(name) if name else None
        if why is not None:
            return (
                f"has a stored {what} that {why}: a stored model string is data anyone who "
                "could write the state directory may have changed, so it is not used; resume "
                "it with the model you mean (model=..., or --model)"
            )
    return None


def activation_budget(
    definition: AgentDefinition | None, total: int | None, used: int = 0
) -> int | None:
    """One activation's token budget: the definition's, within what is left of the total."""
    own = definition.token_budget if definition is not None else None
    if total is None:
        return own
    left = max(0, total - used)
    return left if own is None else min(own, left)


def stored_settings(spec: AgentSpec, default: ChildConfig) -> SpawnSettings:
    """What of the spawn can be stored for a cold resume in another process: a model string
    (a provider object is stored by the name it was built from, when it has one), never a
    provider object, a launcher object or the child's `env` values."""
    run = spec.run
    cfg = run.config or default
    missing: list[str] = []
    model = model_string(run.model)
    if model is None and run.model is not None:
        missing.append("model")
    launcher = cfg.launcher if isinstance(cfg.launcher, str) else "local"
    if not isinstance(cfg.launcher, str):
        missing.append("launcher")
    if cfg.env:
        missing.append("env")
    limits_of = run.limits or Limits()
    limits = {
        name: getattr(limits_of, name)
        for name in LIMIT_FIELDS
        if getattr(limits_of, name) is not None
    }
    # `command=` (the run's) wins over the config's, as when the run was planned.
    command = list(run.command if run.command is not None else cfg.command)
    return SpawnSettings(
        model=model,
        limits=limits,
        command=[] if tuple(command) == DEFAULT_COMMAND else command,
        launcher=launcher,
        containment=cfg.containment,
        spawner=cfg.spawner,
        transport=cfg.transport,
        pass_env=list(cfg.pass_env),
        keep_alive=spec.keep_alive,
        token_total=spec.token_total,
        description=run.description,
        missing=missing,
    )


def model_string(model: ModelSpec) -> str | None:
    """The model string to store for a cold resume: the string given (a scripted file made
    absolute, so it resumes from any directory), a `NamedModel`'s name, else `None`."""
    name = model.name if isinstance(model, NamedModel) else model
    if not isinstance(name, str):
        return None
    return absolute_model(name)
