"""Checks of a run request that catch the caller's likely mistakes before anything is spawned:
an agent that needs a model and has none, an idle limit that tether's own heartbeats cannot
keep open, and — for the command line — limits named by their flags.

An error here is bad usage (`ValueError`, exit status 2 on the command line); a warning
(`RuntimeWarning`) is a request that can work but probably does not do what was meant.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from tether.parent.process.config import DEFAULT_COMMAND
from tether.parent.process.limits import Limits, parse_duration, parse_size
from tether.protocol.messages import HEARTBEAT_SECONDS, AgentDefinition

IDLE_HEADROOM = 2.0
"""The idle limit of a run in tether's own child should be at least this many heartbeat
intervals: a heartbeat delayed by a busy machine must not be mistaken for silence."""


def runs_builtin_loop(command: Sequence[str]) -> bool:
    """Whether a child started with `command` runs tether's built-in agent loop (tether's
    runtime without a custom agent; a `--command` child or a custom agent may need no model)."""
    return tuple(command) == DEFAULT_COMMAND


def runs_tether_child(command: Sequence[str]) -> bool:
    """Whether the child is tether's own runtime (built-in loop or a hosted custom agent),
    which sends heartbeats every `HEARTBEAT_SECONDS` while a step is pending."""
    return tuple(command[: len(DEFAULT_COMMAND)]) == DEFAULT_COMMAND


def check_model(command: Sequence[str], definition: AgentDefinition, has_model: bool) -> None:
    """Refuse a run of the built-in loop with no model to ask: it would spawn a child only to
    fail at its first turn."""
    if has_model or not runs_builtin_loop(command):
        return
    raise ValueError(
        f"agent {definition.type!r} runs tether's built-in agent loop, which needs a model: "
        "pass model=... (tether run --model), e.g. scripted:FILE, openai:MODEL or "
        "anthropic:MODEL (docs/models.md)"
    )


def idle_warning(command: Sequence[str], limits: Limits) -> str | None:
    """Why the idle limit is likely to cut a healthy run of tether's own child, or `None`."""
    idle = limits.idle_seconds
    if idle is None or not runs_tether_child(command):
        return None
    least = IDLE_HEADROOM * HEARTBEAT_SECONDS
    if idle >= least:
        return None
    return (
        f"idle limit {idle:g}s: tether's child sends a heartbeat every {HEARTBEAT_SECONDS:g}s "
        f"while a tool call is pending, so any step longer than {idle:g}s will be cut as "
        f"unresponsive; use at least {least:g}s"
    )


def warn_idle(command: Sequence[str], limits: Limits) -> None:
    why = idle_warning(command, limits)
    if why is not None:
        warnings.warn(why, RuntimeWarning, stacklevel=3)


# --- the command line ---------------------------------------------------------------------------

LIMIT_FLAGS: Mapping[str, str] = {
    "wall": "--timeout",
    "idle": "--idle-timeout",
    "memory": "--memory",
    "cpu": "--cpu",
    "processes": "--processes",
    "open_files": "--open-files",
    "file_size": "--file-size",
}
"""`Limits` field → the `tether run` flag that sets it."""


def limits_from_flags(values: Mapping[str, Any]) -> Limits:
    """`Limits` from `tether run`'s flags (`values`: field → the flag's value or `None`), with
    every error naming the flag, not the field. Raises `ValueError`."""
    parsed: dict[str, Any] = {}
    for field, flag in LIMIT_FLAGS.items():
        value = values.get(field)
        if field in ("wall", "idle", "cpu"):
            parsed[field] = parse_duration(value, flag)
        elif field in ("memory", "file_size"):
            parsed[field] = parse_size(value, flag)
        else:
            parsed[field] = value
    try:
        return Limits(**parsed)
    except ValueError as exc:
        text = str(exc)
        field = text.split(":", 1)[0]
        if field in LIMIT_FLAGS:
            text = LIMIT_FLAGS[field] + text[len(field) :]
        raise ValueError(text) from None
