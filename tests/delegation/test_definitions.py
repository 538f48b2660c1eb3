"""Sub-agent definitions: registration from Python, TOML definitions files with precise
errors, and a dump/load round trip."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.parent.delegation import (
    BUILTIN_ROLES,
    DefinitionError,
    Registry,
    SubagentDefinition,
    dump_definitions,
    load_definitions,
)
from tether.parent.roles.prompts import SUBAGENT_SYSTEM_PROMPT


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> DefinitionError:
    path = write(tmp_path, text)
    with pytest.raises(DefinitionError) as got:
        load_definitions(path)
    return got.value


# --- Python -----------------------------------------------------------------------------------


def test_a_registry_keeps_definitions_in_order_and_refuses_a_second_of_the_same_type() -> None:
    a = SubagentDefinition(type="alpha", description="first")
    b = SubagentDefinition(type="beta", description="second")
    reg = Registry([a, b])
    assert reg.types == ["alpha", "beta"]
    assert reg["beta"] == b and "alpha" in reg and reg.get("gamma") is None
    with pytest.raises(DefinitionError, match="duplicate type"):
        reg.register(SubagentDefinition(type="alpha", description="again"))


def test_registration_from_python_checks_the_same_constraints_as_a_file() -> None:
    reg = Registry()
    with pytest.raises(DefinitionError, match="not a valid type"):
        reg.register(SubagentDefinition(type="two words", description="x"))
    with pytest.raises(DefinitionError, match="maxSteps"):
        reg.register(SubagentDefinition(type="a", description="x", max_steps=0))
    with pytest.raises(DefinitionError, match="no nesting"):
        reg.register(SubagentDefinition(type="a", description="x", tools=["read_file", "task"]))
    assert len(reg) == 0


def test_a_definition_without_read_only_is_read_only() -> None:
    assert SubagentDefinition(type="a", description="x").read_only is True


def test_the_wire_form_maps_max_steps_to_max_iterations_and_prepends_the_subagent_prompt() -> None:
    d = SubagentDefinition(
        type="researcher",
        description="finds things",
        model="openai:gpt-4o-mini",
        max_steps=7,
        stop_conditions=["no_tool_calls"],
        tools=["read_file", "grep"],
        compaction_model="openai:small",
        instructions="Cite every source.",
        token_budget=5000,
        compaction_threshold=9000,
    )
    wire = d.to_wire()
    assert wire.max_iterations == 7
    assert wire.type == "researcher" and wire.model == "openai:gpt-4o-mini"
    assert wire.stop_conditions == ["no_tool_calls"] and wire.tools == ["read_file", "grep"]
    assert wire.compaction_model == "openai:small" and wire.token_budget == 5000
    assert wire.compaction_threshold == 9000
    assert wire.instructions.startswith(SUBAGENT_SYSTEM_PROMPT.strip())
    assert wire.instructions.endswith("Cite every source.")
    assert "explore mode" in wire.instructions and wire.read_only is True


def test_a_per_spawn_read_only_overrides_the_default_either_way() -> None:
    d = SubagentDefinition(type="a", description="x", read_only=True)
    assert d.to_wire(read_only=False).read_only is False
    assert "build mode" in d.to_wire(read_only=False).instructions
    b = SubagentDefinition(type="b", description="x", read_only=False)
    assert b.to_wire(read_only=True).read_only is True


# --- files ------------------------------------------------------------------------------------


def test_a_file_defines_agents_with_keys_spelled_as_on_the_wire(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[[agent]]
type = "researcher"
description = "Finds prior work."
model = "openai:gpt-4o-mini"
maxSteps = 30
stopConditions = ["no_tool_calls"]
tools = ["read_file", "grep"]
compactionModel = "openai:small"
instructions = '''
Cite every source by path.
'''
readOnly = false
provider = "spawn"
tokenBudget = 100000
compactionThreshold = 50000
""",
    )
    (d,) = load_definitions(path)
    assert d == SubagentDefinition(
        type="researcher",
        description="Finds prior work.",
        model="openai:gpt-4o-mini",
        max_steps=30,
        stop_conditions=["no_tool_calls"],
        tools=["read_file", "grep"],
        compaction_model="openai:small",
        instructions="Cite every source by path.\n",
        read_only=False,
        provider="spawn",
        token_budget=100000,
        compaction_threshold=50000,
    )


def test_a_table_naming_a_built_in_role_starts_from_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[[agent]]\ntype = "explorer"\nmodel = "openai:mini"\n')
    (d,) = load_definitions(path)
    explorer = next(r for r in BUILTIN_ROLES if r.type == "explorer")
    assert d == explorer.replace(model="openai:mini")


def test_a_file_with_no_tables_defines_nothing(tmp_path: Path) -> None:
    assert load_definitions(write(tmp_path, "# nothing yet\n")) == []


@pytest.mark.parametrize(
    ("text", "index", "key", "expected"),
    [
        (
            '[[agent]]\ntype = "a"\ndescription = "x"\nmaxStep = 3\n',
            0,
            "maxStep",
            "did you mean 'maxSteps'",
        ),
        (
            '[[agent]]\ntype = "a"\ndescription = "x"\nmaxIterations = 3\n',
            0,
            "maxIterations",
            "spelled maxSteps",
        ),
        (
            '[[agent]]\ntype = "a"\ndescription = "x"\nmaxSteps = "ten"\n',
            0,
            "maxSteps",
            "expected `int`, got `str`",
        ),
        ('[[agent]]\ntype = "a"\ndescription = "x"\nmaxSteps = 0\n', 0, "maxSteps", ">= 1"),
        (
            '[[agent]]\ntype = "a"\ndescription = "x"\nmaxSteps = true\n',
            0,
            "maxSteps",
            "got `bool`",
        ),
        (
            '[[agent]]\ntype = "a"\ndescription = "x"\nreadOnly = "yes"\n',
            0,
            "readOnly",
            "expected `bool`",
        ),
        (
            '[[agent]]\ntype = "a"\ndescription = "x"\nstopConditions = ["never"]\n',
            0,
            "stopConditions[0]",
            "invalid enum value",
        ),
        ('[[agent]]\ntype = "a"\ndescription = "x"\ntools = ["task"]\n', 0, "tools", "no nesting"),
        (
            '[[agent]]\ntype = "a"\ndescription = "x"\nprovider = "Not A Name"\n',
            0,
            "provider",
            "regex",
        ),
        ('[[agent]]\ntype = "a"\n', 0, "description", "missing (required)"),
        ('[[agent]]\ndescription = "x"\n', 0, "type", "missing (required)"),
        ('[[agent]]\ntype = "my agent"\ndescription = "x"\n', 0, "type", "not a valid type"),
        ('[[agent]]\ntype = "1st"\ndescription = "x"\n', 0, "type", "not a valid type"),
        ('[[agent]]\ntype = "a"\ndescription = ""\n', 0, "description", "length >= 1"),
        (
            '[[agent]]\ntype = "a"\ndescription = "x"\n[[agent]]\ntype = "b"\ndescription = "y"\n'
            '[[agent]]\ntype = "a"\ndescription = "z"\n',
            2,
            "type",
            "duplicate type 'a': already defined by [[agent]] #1",
        ),
        ('[[agent]]\ntype = "explorer"\nmaxSteps = -1\n', 0, "maxSteps", ">= 1"),
        ('[[agent]]\ntype = "explorer"\ncolour = "red"\n', 0, "colour", "unknown key"),
    ],
)
def test_a_bad_table_is_refused_naming_the_file_the_table_the_key_and_what_was_expected(
    tmp_path: Path, text: str, index: int, key: str, expected: str
) -> None:
    err = error_of(tmp_path, text)
    assert err.file == str(tmp_path / "agents.toml")
    assert err.index == index
    assert err.key == key
    assert expected.lower() in str(err).lower()
    assert str(err).startswith(f"{tmp_path / 'agents.toml'}: [[agent]] #{index + 1}")


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ('name = "x"\n', "name", "holds [[agent]] and [[provider]] tables"),
        ('[agent]\ntype = "a"\n', "agent", "found a single [agent] table"),
        ('agent = "a"\n', "agent", "found a str"),
    ],
)
def test_a_file_that_is_not_a_list_of_agent_tables_is_refused(
    tmp_path: Path, text: str, key: str, expected: str
) -> None:
    err = error_of(tmp_path, text)
    assert err.key == key and err.index is None
    assert expected in str(err)


def test_a_file_that_is_not_toml_or_cannot_be_read_is_refused(tmp_path: Path) -> None:
    assert "not valid TOML" in str(error_of(tmp_path, "[[agent]\n"))
    with pytest.raises(DefinitionError, match="cannot read the file"):
        load_definitions(tmp_path / "missing.toml")


# --- round trip -------------------------------------------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
names = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,15}", fullmatch=True)
definitions = st.builds(
    SubagentDefinition,
    type=st.one_of(names, st.sampled_from([r.type for r in BUILTIN_ROLES])),
    description=text.filter(bool),
    model=st.none() | text,
    max_steps=st.integers(1, 10_000),
    stop_conditions=st.lists(st.just("no_tool_calls"), max_size=1),
    tools=st.none() | st.lists(names.filter(lambda n: n != "task"), max_size=4),
    compaction_model=st.none() | text,
    instructions=text,
    read_only=st.booleans(),
    provider=st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True),
    token_budget=st.none() | st.integers(1, 10**9),
    compaction_threshold=st.none() | st.integers(1, 10**9),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(definitions, max_size=5, unique_by=lambda d: d.type))
def test_any_set_of_definitions_survives_a_dump_and_a_load(
    tmp_path: Path, defs: list[SubagentDefinition]
) -> None:
    # A built-in type whose optional keys are unset by the role can always be dumped; the
    # hypothesis draws only such values (the roles set no optional key).
    path = tmp_path / "round.toml"
    path.write_text(dump_definitions(defs), encoding="utf-8")
    assert load_definitions(path) == defs


def test_the_built_in_roles_dump_to_a_file_of_bare_type_lines() -> None:
    dumped = dump_definitions(BUILTIN_ROLES)
    assert dumped.count("[[agent]]") == 5
    assert "description" not in dumped  # everything comes from the role
