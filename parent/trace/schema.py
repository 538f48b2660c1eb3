"""The JSON Schema of one trace line, generated from the Structs of `format.py`.

`parent/trace/schema.json` is this document, checked in; a test fails when it drifts.
Regenerate it with `python -m tether.parent.trace.schema > parent/trace/schema.json`; `tether
trace schema` prints it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec

from tether.parent.trace.format import TRACE_VERSION, TraceLine
from tether.protocol.messages import PROTOCOL_VERSION

_REF = "#/$defs/{name}"


def build_schema() -> dict[str, Any]:
    (line,), defs = msgspec.json.schema_components([TraceLine], ref_template=_REF)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tether trace line",
        "description": (
            "One line of a tether trace (JSON Lines, UTF-8, one object per line), told apart "
            "by `kind`. Readers ignore fields they do not know."
        ),
        "traceVersion": TRACE_VERSION,
        "protocolVersion": PROTOCOL_VERSION,
        **line,
        "$defs": dict(sorted(defs.items())),
    }


def render() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
