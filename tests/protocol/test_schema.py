"""`protocol/schema.json` is the checked-in JSON Schema of the protocol; it must not drift."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from tether.protocol import METHODS, PROTOCOL_VERSION, ErrorCode
from tether.protocol.schema import build_schema, render

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "protocol" / "schema.json"
REGENERATE = ".venv/bin/python -m tether.protocol.schema > protocol/schema.json"


def test_the_checked_in_schema_matches_the_structs() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == render(), (
        f"protocol/schema.json is stale; regenerate it with `{REGENERATE}` and commit it"
    )


def test_the_installed_package_ships_the_same_schema() -> None:
    shipped = resources.files("tether.protocol").joinpath("schema.json").read_text("utf-8")
    assert shipped == render(), f"regenerate with `{REGENERATE}`"


def test_the_schema_lists_every_method_with_its_kind_and_direction() -> None:
    schema = build_schema()
    assert schema["protocolVersion"] == PROTOCOL_VERSION
    assert set(schema["methods"]) == set(METHODS)
    for name, spec in METHODS.items():
        entry = schema["methods"][name]
        assert entry["kind"] == spec.kind
        assert entry["direction"] == spec.direction
        assert ("result" in entry) == (spec.kind == "request")


def test_every_reference_in_the_schema_resolves() -> None:
    schema = build_schema()
    text = json.dumps(schema)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/$defs/')[1:]}:
        assert ref in schema["$defs"], ref


def test_the_schema_carries_the_error_code_table() -> None:
    assert build_schema()["errorCodes"] == {c.name: int(c) for c in ErrorCode}


def test_methods_without_params_say_to_omit_them_rather_than_send_null() -> None:
    # classify() rejects `"params": null` (JSON-RPC 2.0 forbids it), so the schema must not
    # advertise a null.
    for name, spec in METHODS.items():
        if spec.params is None:
            params = build_schema()["methods"][name]["params"]
            assert "null" not in json.dumps(params["type"]), name
