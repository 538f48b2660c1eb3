"""The task tool: a schema built from the definitions, its formats, and tether's own validation
of a model's arguments (every problem an error result naming the argument)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.cli.main import main as tether_main
from tether.parent.delegation import (
    Registry,
    SubagentDefinition,
    TaskOutput,
    TaskRequest,
    TaskTool,
    builtin_registry,
    task_tool,
)


def tool() -> TaskTool:
    got = task_tool(builtin_registry())
    assert got is not None
    return got


def refusal(arguments: object) -> TaskOutput:
    got = tool().validate(arguments)
    assert isinstance(got, TaskOutput), got
    assert got.status == "error" and got.error == "invalid_arguments" and got.steps == 0
    return got


def problems(arguments: object) -> dict[str, str]:
    return {p.argument: p.problem for p in refusal(arguments).problems}


GOOD = {"subagent_type": "explorer", "description": "find the TODOs", "prompt": "List every TODO."}


def test_no_definitions_means_no_tool() -> None:
    assert task_tool([]) is None
    assert task_tool(Registry()) is None
    with pytest.raises(ValueError):
        TaskTool(Registry())


def test_the_schema_offers_the_registered_types_with_their_descriptions() -> None:
    reg = Registry(
        [
            SubagentDefinition(type="researcher", description="Finds prior work."),
            SubagentDefinition(type="coder", description="Writes code.", read_only=False),
        ]
    )
    schema = TaskTool(reg).input_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    st_ = schema["properties"]["subagent_type"]
    assert st_["enum"] == ["researcher", "coder"]
    assert "- researcher (read-only by default): Finds prior work." in st_["description"]
    assert "- coder (build mode by default): Writes code." in st_["description"]
    assert schema["properties"]["description"]["maxLength"] == 80
    assert schema["required"] == ["subagent_type", "description", "prompt"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {
        "subagent_type",
        "description",
        "prompt",
        "readOnly",
        "forkContext",
        "attempts",
    }


def test_the_description_carries_the_delegation_guidance() -> None:
    text = tool().description
    for part in ("When to delegate:", "When not to:", "A good prompt", "A bad prompt"):
        assert part in text


def test_the_formats_wrap_the_same_input_schema() -> None:
    t = tool()
    plain = t.json_schema()
    assert plain["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert plain["title"] == "task" and plain["description"] == t.description
    assert {
        k: v for k, v in plain.items() if k not in ("$schema", "title", "description")
    } == t.input_schema
    jsonschema.Draft202012Validator.check_schema(plain)
    assert t.openai() == {
        "type": "function",
        "function": {
            "name": "task",
            "description": t.description,
            "parameters": t.input_schema,
            "strict": False,
        },
    }
    assert t.openai_responses() == {
        "type": "function",
        "name": "task",
        "description": t.description,
        "parameters": t.input_schema,
        "strict": False,
    }
    assert t.anthropic() == {
        "name": "task",
        "description": t.description,
        "input_schema": t.input_schema,
    }
    with pytest.raises(ValueError, match="unknown format"):
        t.export("yaml")


def test_good_arguments_become_a_request() -> None:
    got = tool().validate({**GOOD, "readOnly": False, "forkContext": True})
    assert got == TaskRequest(
        subagent_type="explorer",
        description="find the TODOs",
        prompt="List every TODO.",
        read_only=False,
        fork_context=True,
    )
    plain = tool().validate(GOOD)
    assert isinstance(plain, TaskRequest) and plain.read_only is None and not plain.fork_context
    assert tool().validate(json.dumps(GOOD)) == plain  # some APIs deliver a JSON string


def test_an_80_character_label_passes_and_81_is_refused_naming_the_argument() -> None:
    assert isinstance(tool().validate({**GOOD, "description": "x" * 80}), TaskRequest)
    got = problems({**GOOD, "description": "x" * 81})
    assert got == {
        "description": "81 characters, at most 80 allowed (a short label; put the task itself "
        "in `prompt`)"
    }


def test_an_unknown_type_lists_the_available_ones() -> None:
    got = problems({**GOOD, "subagent_type": "wizard"})
    assert got == {
        "subagent_type": 'unknown sub-agent type "wizard"; available: explorer, reviewer, '
        "verifier, tester, general"
    }


def test_every_problem_is_reported_at_once() -> None:
    got = problems({"subagent_type": 3, "description": "   ", "readOnly": "no", "extra": 1})
    assert got == {
        "subagent_type": "expected a string, got a number",
        "description": "must not be empty or blank",
        "prompt": "missing (required)",
        "readOnly": "expected a boolean, got a string",
        "extra": "unknown argument; the arguments are: subagent_type, description, prompt, "
        "readOnly, forkContext, attempts",
    }
    out = refusal({"subagent_type": 3})
    assert "nothing was run" in out.summary and "prompt: missing (required)" in out.message


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (None, "the arguments must be a JSON object"),
        ([1, 2], "the arguments must be a JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_arguments_that_are_not_an_object_are_refused(arguments: object, problem: str) -> None:
    (p,) = refusal(arguments).problems
    assert p.argument == "" and problem in p.problem


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=90),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=5,
)
argument_objects = st.dictionaries(
    st.sampled_from(["subagent_type", "description", "prompt", "readOnly", "forkContext", "x"]),
    json_values | st.sampled_from(["explorer", "tester", "a label"]),
)


@given(argument_objects)
def test_validation_agrees_with_the_schema_and_never_raises(arguments: dict[str, Any]) -> None:
    t = tool()
    valid = jsonschema.Draft202012Validator(t.input_schema).is_valid(arguments)
    got = t.validate(arguments)
    assert isinstance(got, TaskRequest) == valid
    if isinstance(got, TaskOutput):
        assert got.status == "error" and got.problems
        assert {p.argument for p in got.problems} <= {
            *arguments,
            "subagent_type",
            "description",
            "prompt",
        }
        json.dumps(got.to_dict())  # readable by any model API


# --- the CLI ----------------------------------------------------------------------------------


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = tether_main(["task-schema", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["json-schema", "openai", "openai-responses", "anthropic"])
def test_task_schema_prints_each_format(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tether.parent.delegation.tool import offered_agent_types
    from tether.parent.providers.builtin import builtin_providers

    code, out, _ = run_cli(["--format", fmt], capsys)
    assert code == 0
    # With the agentType the built-in providers offer (spawn and fork), as an orchestrator's.
    offered = task_tool(builtin_registry(), agent_types=offered_agent_types(builtin_providers()))
    assert offered is not None
    assert json.loads(out) == offered.export(fmt)


def test_task_schema_reads_a_definitions_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agents.toml"
    path.write_text('[[agent]]\ntype = "researcher"\ndescription = "Finds prior work."\n')
    code, out, _ = run_cli(["--agents", str(path), "--format", "anthropic"], capsys)
    assert code == 0
    assert json.loads(out)["input_schema"]["properties"]["subagent_type"]["enum"] == ["researcher"]


def test_task_schema_refuses_a_bad_or_empty_file_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agents.toml"
    path.write_text('[[agent]]\ntype = "researcher"\ndescription = "x"\nmaxSteps = 0\n')
    code, out, err = run_cli(["--agents", str(path)], capsys)
    assert code == 2 and out == ""
    assert f"{path}: [[agent]] #1 ('researcher'): key 'maxSteps'" in err
    path.write_text("")
    code, out, err = run_cli(["--agents", str(path)], capsys)
    assert code == 2 and "no task tool" in err


def test_the_installed_tether_command_has_task_schema() -> None:
    got = subprocess.run(
        [sys.executable, "-m", "tether.parent.cli", "task-schema", "--format", "openai"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["function"]["name"] == "task"


def test_the_cli_offers_exactly_the_tools_formats() -> None:
    from tether.parent.cli import task_schema
    from tether.parent.delegation import tool

    assert list(task_schema.FORMATS) == list(tool.FORMATS)


def test_importing_the_supervisor_does_not_import_the_schema_validator() -> None:
    code = (
        "import sys, tether.parent.supervisor, tether.parent.cli.main; "
        "sys.exit(1 if 'jsonschema' in sys.modules else 0)"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert got.returncode == 0, got.stderr


# --- agentType: the provider, per call ------------------------------------------------------

KINDS = {
    "spawn": "a fresh tether child",
    "fork": "seeded with your turns",
    "claude": "an ACP agent",
}


def test_agent_type_is_offered_only_when_there_is_a_choice_of_providers() -> None:
    assert "agentType" not in tool().input_schema["properties"]
    one = task_tool(builtin_registry(), agent_types={"spawn": "a fresh tether child"})
    assert one is not None and "agentType" not in one.input_schema["properties"]
    many = task_tool(builtin_registry(), agent_types=KINDS)
    assert many is not None
    prop = many.input_schema["properties"]["agentType"]
    assert prop["enum"] == ["spawn", "fork", "claude"]
    assert "- claude: an ACP agent" in prop["description"]
    assert "agentType" not in many.input_schema["required"]
    jsonschema.Draft202012Validator.check_schema(many.json_schema())


def test_agent_type_names_one_of_the_offered_providers_or_is_refused() -> None:
    many = task_tool(builtin_registry(), agent_types=KINDS)
    assert many is not None
    args = {"subagent_type": "explorer", "description": "look", "prompt": "Look."}
    got = many.validate({**args, "agentType": "claude"})
    assert isinstance(got, TaskRequest) and got.agent_type == "claude"
    got = many.validate(args)
    assert isinstance(got, TaskRequest) and got.agent_type is None
    refused = many.validate({**args, "agentType": "inprocess"})
    assert isinstance(refused, TaskOutput) and refused.error == "invalid_arguments"
    assert 'unknown agent type "inprocess"; available: spawn, fork, claude' in refused.message
    # Without the offer, the argument is unknown: a model cannot name a provider at all.
    refused = tool().validate({**args, "agentType": "spawn"})
    assert isinstance(refused, TaskOutput) and "unknown argument" in refused.message
