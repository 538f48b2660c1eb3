"""docs/delegation.md cannot drift from the code: its schema block is what `tether
task-schema` prints, and its examples are what the code accepts and produces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from tether.parent.cli.main import main as tether_main
from tether.parent.delegation import TaskOutput, TaskRequest, builtin_registry, task_tool
from tether.parent.delegation.ledger import OrchestratorUsage, UsageRecord

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "delegation.md").read_text()
README = (ROOT / "README.md").read_text()


def block(marker: str) -> str:
    got = re.search(rf"<!-- {marker} -->\n```json\n(.*?)```", DOC, re.DOTALL)
    assert got is not None, marker
    return got.group(1)


def tool_() -> object:
    tool = task_tool(builtin_registry())
    assert tool is not None
    return tool


def test_the_schema_in_the_doc_is_what_task_schema_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    got = re.search(
        r"<!-- task-schema:begin -->\n```json\n(.*?)```\n<!-- task-schema:end -->", DOC, re.DOTALL
    )
    assert got is not None
    assert tether_main(["task-schema"]) == 0
    expected = capsys.readouterr().out
    assert got.group(1) == expected, (
        "docs/delegation.md is out of date: replace the task-schema block with the output of "
        "`tether task-schema`"
    )


def test_the_example_call_is_valid_and_the_example_output_is_a_task_output() -> None:
    tool = task_tool(builtin_registry())
    assert tool is not None
    assert isinstance(tool.validate(json.loads(block("example:call"))), TaskRequest)
    raw = json.loads(block("example:output"))
    out = msgspec.convert(raw, TaskOutput)
    assert out.to_dict() == raw  # no field the type does not know, none it would add
    assert out.compact()["artifacts"] == [
        {"path": "/work/ws/tests/test_adjust.py", "size": 1432, "fsType": "file"}
    ]
    assert out.compact() == json.loads(block("example:compact"))


def test_the_example_refusal_is_what_validation_returns() -> None:
    tool = task_tool(builtin_registry())
    assert tool is not None
    got = tool.validate({"subagent_type": "tester", "description": "x" * 93})
    assert isinstance(got, TaskOutput)
    assert got.to_dict() == json.loads(block("example:refusal"))


def test_the_example_ledger_lines_decode_as_ledger_entries() -> None:
    decoder = msgspec.json.Decoder(UsageRecord | OrchestratorUsage)
    lines = block("example:ledger").strip().splitlines()
    entries = [decoder.decode(line) for line in lines]
    assert isinstance(entries[0], UsageRecord) and isinstance(entries[1], OrchestratorUsage)
    assert [msgspec.json.encode(e).decode() for e in entries] == lines


def test_the_readme_links_the_delegation_doc() -> None:
    assert "docs/delegation.md" in README
