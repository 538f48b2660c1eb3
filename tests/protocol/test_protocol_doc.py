"""docs/protocol.md cannot drift from the code: its examples decode, its tables match the types.

- every line of a ```jsonl block is a valid message: requests and notifications name a method of
  the table in the right kind, params decode into the method's type, and each response answers
  an earlier request of the document whose result type it fits;
- a ```json TypeName block decodes into that message type;
- no example carries a field the type does not have (msgspec would silently ignore a typo);
- the field tables of the message reference list each type's wire names, in order, with which
  are required and the defaults; the method, error-code, failure-kind and event-kind tables list
  exactly what the code has.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tether.protocol import (
    METHODS,
    ErrorCode,
    ErrorResponse,
    Notification,
    Request,
    Response,
    decode_line,
    decode_params,
    decode_result,
)
from tether.protocol import messages as m
from tether.protocol.codec import encode_notification
from tether.protocol.connection import Connection, NotificationDropped
from tether.protocol.schema import build_schema

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
TEXT = DOC.read_text(encoding="utf-8")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _blocks(info: str) -> list[str]:
    return [body for head, body in FENCE.findall(TEXT) if head.strip() == info]


def _section(title: str) -> str:
    """The text of the section headed `title` (any level), up to the next heading of its level."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", TEXT, re.MULTILINE)
    assert match, f"docs/protocol.md has no section {title!r}"
    level = len(match.group(1))
    rest = TEXT[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def _rows(text: str) -> list[list[str]]:
    """The body rows of the markdown tables in `text`, cells stripped."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return [
        r for r in rows if r and r[0] not in {"field", "method", "code", "kind", "`failure.kind`"}
    ]


def _contained(doc: Any, full: Any, where: str = "$") -> None:
    """Everything the document wrote is in the decoded-and-re-encoded value (no unknown keys)."""
    if isinstance(doc, dict):
        assert isinstance(full, dict), where
        for key, value in doc.items():
            assert key in full, f"{where}.{key} is not a field of the message type"
            _contained(value, full[key], f"{where}.{key}")
    elif isinstance(doc, list):
        assert isinstance(full, list) and len(doc) == len(full), where
        for i, (a, b) in enumerate(zip(doc, full, strict=True)):
            _contained(a, b, f"{where}[{i}]")
    else:
        assert type(doc) is type(full) and doc == full, f"{where}: {doc!r} != {full!r}"


def _member(line: str, name: str) -> Any:
    return json.loads(line).get(name)


# --- examples ---------------------------------------------------------------------------------


def _jsonl_lines() -> list[str]:
    return [line for body in _blocks("jsonl") for line in body.splitlines() if line.strip()]


def test_the_document_has_examples_of_every_method() -> None:
    seen = {_member(line, "method") for line in _jsonl_lines()}
    assert set(METHODS) <= seen


def test_every_jsonl_line_is_a_valid_message_that_fits_the_method_table() -> None:
    lines = _jsonl_lines()
    assert len(lines) > 20
    pending: dict[Any, str] = {}
    for n, line in enumerate(lines, 1):
        where = f"jsonl line {n}: {line[:80]}"
        got = decode_line(line.encode())
        if isinstance(got, Request | Notification):
            spec = METHODS.get(got.method)
            assert spec is not None, where
            assert spec.kind == ("request" if isinstance(got, Request) else "notification"), where
            params = decode_params(got.method, got.params)
            if params is not None:
                _contained(_member(line, "params"), msgspec.to_builtins(params), where)
            if isinstance(got, Request):
                assert got.id not in pending, f"{where}: id {got.id!r} is already in flight"
                pending[got.id] = got.method
        elif isinstance(got, Response):
            assert got.id in pending, f"{where}: answers no earlier request"
            method = pending.pop(got.id)
            result = decode_result(method, got.result)
            _contained(_member(line, "result"), msgspec.to_builtins(result), where)
        elif isinstance(got, ErrorResponse):
            assert got.error.code in set(ErrorCode), where
            if got.id is not None:
                assert got.id in pending, f"{where}: answers no earlier request"
                method = pending.pop(got.id)
                if got.error.code == ErrorCode.UNSUPPORTED_VERSION:
                    data = msgspec.convert(got.error.data, m.UnsupportedVersionData)
                    _contained(got.error.data, msgspec.to_builtins(data), where)
        else:
            pytest.fail(f"{where}: does not decode: {got!r}")


def test_typed_json_blocks_decode_into_their_message_type() -> None:
    typed = [
        (head.split()[1], body) for head, body in FENCE.findall(TEXT) if head.startswith("json ")
    ]
    assert typed
    for name, body in typed:
        tp = getattr(m, name)
        value = msgspec.json.decode(body.encode(), type=tp)
        _contained(json.loads(body), msgspec.to_builtins(value), name)


# --- tables -----------------------------------------------------------------------------------


def _wire_types() -> dict[str, type[msgspec.Struct]]:
    names = build_schema()["$defs"]
    return {name: getattr(m, name) for name in names}


def test_every_message_type_has_a_field_table() -> None:
    reference = _section("Message reference")
    headed = set(re.findall(r"^#### (\w+)$", reference, re.MULTILINE))
    assert headed == set(_wire_types())


@pytest.mark.parametrize("name", sorted(_wire_types()))
def test_each_field_table_matches_its_message_type(name: str) -> None:
    tp = _wire_types()[name]
    rows = _rows(_section(name))
    fields = msgspec.structs.fields(tp)
    assert [r[0] for r in rows] == [f"`{f.encode_name}`" for f in fields], name
    for row, f in zip(rows, fields, strict=True):
        default = row[2]
        if f.required:
            assert default == "required", (name, f.name)
            continue
        value = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
        if isinstance(value, msgspec.Struct):
            assert default == "all defaults", (name, f.name)
        else:
            assert default.startswith("`") and default.endswith("`"), (name, f.name)
            assert json.loads(default.strip("`")) == msgspec.to_builtins(value), (name, f.name)


def test_the_method_table_lists_every_method_with_its_kind_and_sender() -> None:
    rows = _rows(_section("Methods"))
    listed = {r[0].strip("`"): (r[1], r[2]) for r in rows}
    sender = {"parent_to_child": "parent", "child_to_parent": "child"}
    assert listed == {name: (s.kind, sender[s.direction]) for name, s in METHODS.items()}


def test_the_error_code_table_lists_every_code_with_its_value() -> None:
    rows = _rows(_section("Error codes"))
    assert {r[1].strip("`"): int(r[0]) for r in rows} == {c.name: int(c) for c in ErrorCode}


def test_the_failure_kind_table_lists_every_kind() -> None:
    rows = _rows(_section("Failure kinds"))
    assert [r[0].strip("`") for r in rows] == list(m.FAILURE_KINDS)


def test_the_event_table_lists_every_event_kind() -> None:
    rows = _rows(_section("`agent/event`"))
    assert [r[0].strip("`") for r in rows] == list(m.EventKind.__args__)


def _bullets(text: str) -> list[str]:
    """The top-level `- ` items of `text`, each with its continuation lines joined."""
    items: list[str] = []
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line[2:])
        elif line.startswith("  ") and items:
            items[-1] += " " + line.strip()
    return [" ".join(i.split()) for i in items]


def test_the_malformed_notification_rule_is_stated_once_and_is_what_the_code_does() -> None:
    """One rule for `agent/event` params that do not fit: dropped and counted, never fatal.
    The parent's list of what it does names `agent/event` in exactly one item, that item says
    so, and no item that fails the run with `protocol` mentions notifications."""
    section = _section("What the tether parent does")
    items = _bullets(section)
    naming = [i for i in items if "agent/event" in i or "notification whose params" in i]
    assert len(naming) == 1, naming
    assert "dropped and counted" in naming[0] and "never fatal" in naming[0], naming[0]
    fatal = [i for i in items if '`failure.kind: "protocol"`' in i]
    assert fatal and not any("agent/event" in i or "notification" in i for i in fatal), fatal
    # ... and the code agrees: a known notification with bad params is dropped, not fatal.
    parent = Connection("parent")
    [ev] = parent.receive_data(encode_notification("agent/event", {"runId": "r", "kind": 7}))
    assert isinstance(ev, NotificationDropped) and ev.known
    assert parent.closed is None
