"""Built-in agent roles. Read-only roles run in explore mode: the child hard-denies mutation."""

from __future__ import annotations

from tether.protocol.messages import AgentDefinition

ROLES: dict[str, AgentDefinition] = {
    d.type: d
    for d in (
        AgentDefinition(
            type="explorer",
            description="Reads and searches a codebase to answer a question; changes nothing.",
            read_only=True,
        ),
        AgentDefinition(
            type="reviewer",
            description="Reviews a change or a file set and reports problems; changes nothing.",
            read_only=True,
        ),
        AgentDefinition(
            type="verifier",
            description="Checks a change adversarially and ends with VERDICT: PASS|FAIL|PARTIAL.",
            read_only=True,
        ),
        AgentDefinition(
            type="tester",
            description="Writes and runs tests for a change.",
            read_only=False,
        ),
        AgentDefinition(
            type="general",
            description="General-purpose agent that may read, write and run commands.",
            read_only=False,
        ),
    )
}


def resolve_agent(agent: str | AgentDefinition) -> AgentDefinition:
    if isinstance(agent, AgentDefinition):
        return agent
    try:
        return ROLES[agent]
    except KeyError:
        known = ", ".join(sorted(ROLES))
        raise ValueError(f"unknown agent {agent!r}; built-in roles: {known}") from None
