"""The JSON Schema of protocol v1, generated from the Structs.

`protocol/schema.json` is this document, checked in; a test fails when it drifts. Regenerate it
with `python -m tether.protocol.schema > protocol/schema.json`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec

from tether.protocol import messages as m
from tether.protocol.depth import DEFAULT_MAX_MESSAGE_DEPTH
from tether.protocol.errors import ErrorCode
from tether.protocol.framing import DEFAULT_MAX_MESSAGE_BYTES
from tether.protocol.methods import METHODS

_REF = "#/$defs/{name}"
# JSON-RPC forbids `"params": null`; a method without params omits the member.
_NO_PARAMS: dict[str, Any] = {
    "description": "No params: omit the member (an empty object or array is accepted).",
    "type": ["object", "array"],
    "maxProperties": 0,
    "maxItems": 0,
}


def build_schema() -> dict[str, Any]:
    types: list[Any] = []
    for spec in METHODS.values():
        for tp in (spec.params, spec.result):
            if tp is not None and tp not in types:
                types.append(tp)
    for extra in (m.UnsupportedVersionData, m.Failure):
        if extra not in types:
            types.append(extra)
    refs, defs = msgspec.json.schema_components(types, ref_template=_REF)
    by_type = dict(zip(types, refs, strict=True))
    methods: dict[str, Any] = {}
    for spec in METHODS.values():
        entry: dict[str, Any] = {
            "kind": spec.kind,
            "direction": spec.direction,
            "summary": spec.summary,
            "params": by_type[spec.params] if spec.params is not None else _NO_PARAMS,
        }
        if spec.kind == "request":
            entry["result"] = by_type[spec.result] if spec.result is not None else {"type": "null"}
        methods[spec.name] = entry
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tether wire protocol",
        "protocolVersion": m.PROTOCOL_VERSION,
        "framing": {
            "encoding": "utf-8",
            "delimiter": "\n",
            "defaultMaxMessageBytes": DEFAULT_MAX_MESSAGE_BYTES,
            "defaultMaxMessageDepth": DEFAULT_MAX_MESSAGE_DEPTH,
        },
        "errorCodes": {code.name: int(code) for code in ErrorCode},
        "methods": methods,
        "$defs": dict(sorted(defs.items())),
    }


def render() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
