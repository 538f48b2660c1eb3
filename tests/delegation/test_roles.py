"""The five built-in roles: their modes, real instructions, and the wire form a child runs."""

from __future__ import annotations

import pytest

from tether.parent.delegation import BUILTIN_ROLES, builtin_registry
from tether.parent.roles.builtins import ROLES, resolve_agent, role
from tether.parent.roles.prompts import ORCHESTRATOR_SYSTEM_PROMPT, SUBAGENT_SYSTEM_PROMPT
from tether.protocol.messages import AgentDefinition


def test_there_are_five_roles_and_tester_is_the_only_one_in_build_mode_by_default() -> None:
    assert [r.type for r in BUILTIN_ROLES] == [
        "explorer",
        "reviewer",
        "verifier",
        "tester",
        "general",
    ]
    assert {r.type for r in BUILTIN_ROLES if not r.read_only} == {"tester"}
    assert {t: w.read_only for t, w in ROLES.items()} == {
        "explorer": True,
        "reviewer": True,
        "verifier": True,
        "tester": False,
        "general": True,
    }


@pytest.mark.parametrize("definition", BUILTIN_ROLES, ids=lambda d: d.type)
def test_every_role_has_instructions_saying_what_to_do_and_deliver(definition: object) -> None:
    from tether.parent.delegation import SubagentDefinition

    assert isinstance(definition, SubagentDefinition)
    text = definition.instructions
    assert text.startswith(f"Role: {definition.type}.")
    assert len(text) > 300
    assert "summary" in text  # what to deliver through complete


def test_read_only_roles_are_told_not_to_change_anything_and_the_tester_not_to_fix_code() -> None:
    reg = builtin_registry()
    assert "Do not try to change anything" in reg["explorer"].instructions
    assert "Do not rewrite the code yourself" in reg["reviewer"].instructions
    assert "Do not change the code under test" in reg["tester"].instructions


def test_the_verifier_must_end_with_a_verdict_line_and_missing_means_partial() -> None:
    text = builtin_registry()["verifier"].instructions
    for verdict in ("PASS", "FAIL", "PARTIAL"):
        assert f"VERDICT: {verdict}" in text
    assert "last line" in text and "never as PASS" in text


def test_a_subagent_is_told_it_cannot_delegate_or_ask_and_must_complete() -> None:
    assert "cannot delegate" in SUBAGENT_SYSTEM_PROMPT
    assert "nobody will answer questions" in SUBAGENT_SYSTEM_PROMPT
    assert "`complete` exactly once" in SUBAGENT_SYSTEM_PROMPT
    assert SUBAGENT_SYSTEM_PROMPT != ORCHESTRATOR_SYSTEM_PROMPT
    assert "task` tool" in ORCHESTRATOR_SYSTEM_PROMPT
    assert "You are a sub-agent" not in ORCHESTRATOR_SYSTEM_PROMPT


def test_the_wire_role_carries_the_subagent_prompt_the_mode_note_and_the_role() -> None:
    explorer = ROLES["explorer"]
    assert explorer.instructions.startswith("You are a sub-agent.")
    assert "explore mode" in explorer.instructions
    assert explorer.instructions.rstrip().endswith(
        builtin_registry()["explorer"].instructions.rstrip()
    )
    assert "build mode" in ROLES["tester"].instructions


def test_resolve_agent_keeps_its_signature_for_names_and_definitions() -> None:
    assert resolve_agent("verifier") is ROLES["verifier"]
    own = AgentDefinition(type="general")
    assert resolve_agent(own) is own
    with pytest.raises(ValueError, match="unknown agent 'wizard'; built-in roles: explorer"):
        resolve_agent("wizard")


def test_role_overrides_the_default_mode_for_one_spawn() -> None:
    assert role("general", read_only=False).read_only is False
    assert role("tester", read_only=True).read_only is True
    assert role("general").read_only is True
    with pytest.raises(ValueError, match="unknown agent"):
        role("wizard")
