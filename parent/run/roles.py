"""Built-in agent roles, in the form a child runs (`AgentDefinition`).

The roles themselves (instructions, default modes) live in `tether.parent.delegation.builtins`;
this module gives their wire form to whoever spawns a child by role name. Each role's wire
definition carries the sub-agent system prompt, a note on its mode and the role's instructions.
Read-only roles (explorer, reviewer, verifier, general) run in explore mode: the child
hard-denies mutation. tester defaults to build mode. `role(name, read_only=...)` overrides the
default for one spawn.
"""

from __future__ import annotations

from tether.parent.delegation.builtins import BUILTIN_ROLES
from tether.protocol.messages import AgentDefinition

ROLES: dict[str, AgentDefinition] = {d.type: d.to_wire() for d in BUILTIN_ROLES}


def role(name: str, *, read_only: bool | None = None) -> AgentDefinition:
    """A built-in role's wire definition; `read_only` overrides its default mode."""
    for d in BUILTIN_ROLES:
        if d.type == name:
            return d.to_wire(read_only=read_only)
    raise ValueError(_unknown(name))


def resolve_agent(agent: str | AgentDefinition) -> AgentDefinition:
    if isinstance(agent, AgentDefinition):
        return agent
    try:
        return ROLES[agent]
    except KeyError:
        raise ValueError(_unknown(agent)) from None


def _unknown(name: str) -> str:
    return f"unknown agent {name!r}; built-in roles: {', '.join(sorted(ROLES))}"
