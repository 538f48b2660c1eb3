"""`parent/trace/schema.json` is the checked-in JSON Schema of a trace line and must not drift;
docs/traces.md lists every kind of line, and its example lines are trace lines."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from tether.parent.trace.format import KINDS, decode, kind_of
from tether.parent.trace.schema import build_schema, render

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "parent" / "trace" / "schema.json"
REGENERATE = ".venv/bin/python -m tether.parent.trace.schema > parent/trace/schema.json"
DOC = (ROOT / "docs" / "traces.md").read_text(encoding="utf-8")


def test_the_checked_in_trace_schema_matches_the_structs() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == render(), (
        f"parent/trace/schema.json is stale; regenerate it with `{REGENERATE}` and commit it"
    )


def test_the_installed_package_ships_the_same_trace_schema() -> None:
    shipped = resources.files("tether.parent.trace").joinpath("schema.json").read_text("utf-8")
    assert shipped == render(), f"regenerate with `{REGENERATE}`"


def test_the_schema_tells_every_kind_apart_and_every_reference_resolves() -> None:
    schema = build_schema()
    mapping = schema["discriminator"]["mapping"]
    assert set(mapping) == {kind_of(k) for k in KINDS}
    for ref in re.findall(r'"\$ref": "#/\$defs/([^"]+)"', json.dumps(schema)):
        assert ref in schema["$defs"], ref
    for kind in KINDS:
        required = schema["$defs"][kind.__name__]["required"]
        assert {"kind", "runId", "wall", "mono"} <= set(required)


def test_the_doc_lists_every_kind_of_line() -> None:
    section = DOC.split("## What is in it", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE)
    assert rows == [kind_of(k) for k in KINDS]


def _contained(doc: Any, full: Any, where: str) -> None:
    if isinstance(doc, dict):
        assert isinstance(full, dict), where
        for key, value in doc.items():
            assert key in full, f"{where}.{key} is not a field of the line"
            _contained(value, full[key], f"{where}.{key}")
    elif isinstance(doc, list):
        assert isinstance(full, list) and len(doc) == len(full), where
        for i, (a, b) in enumerate(zip(doc, full, strict=True)):
            _contained(a, b, f"{where}[{i}]")
    else:
        assert doc == full, f"{where}: {doc!r} != {full!r}"


def test_every_example_line_of_the_doc_is_a_trace_line_with_no_unknown_field() -> None:
    blocks = re.findall(r"^```jsonl\n(.*?)^```$", DOC, re.MULTILINE | re.DOTALL)
    assert blocks
    kinds = set()
    for block in blocks:
        for n, raw in enumerate(block.splitlines(), 1):
            line = decode(raw)
            kinds.add(kind_of(line))
            _contained(json.loads(raw), msgspec.to_builtins(line), f"line {n}")
    assert {"header", "turn", "child_event", "result"} <= kinds
