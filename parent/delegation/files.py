"""Definitions files: TOML, one `[[agent]]` table per definition, keys spelled as on the wire.

```toml
[[agent]]
type = "researcher"
description = "Finds and summarises prior work on a question."
model = "openai:gpt-4o-mini"
maxSteps = 30
readOnly = true
instructions = '''
Cite every source by path.
'''

[[agent]]
type = "explorer"          # a built-in role's type: start from that role
model = "anthropic:claude-haiku"

[[agent]]
type = "tester"
network = ["pypi.org", "files.pythonhosted.org"]   # within the orchestration's --allow-net
```

Named providers may be defined beside the agents, in `[[provider]]` tables (an ACP agent's
command, a tether-protocol executable), for definitions to name as their `provider`; see
`tether.parent.providers.tables` and `load_providers`.

A table whose `type` is a built-in role's starts from that role (its description,
instructions and mode) and changes only the keys it gives; any other type needs at least a
`description`. The file's definitions are the whole set: a role the file does not mention is
not offered. Unknown keys, duplicate types, and values of the wrong kind are refused with the
file, the table's index, the key and what was expected (`DefinitionError`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from tether.parent.roles.builtins import BUILTIN_ROLES
from tether.parent.roles.definitions import (
    KEYS,
    DefinitionError,
    Registry,
    SubagentDefinition,
    check_keys,
    definition_from_mapping,
)

if TYPE_CHECKING:
    from tether.parent.run.provider import Provider, ProviderRegistry


def _read(file: str) -> dict[str, Any]:
    try:
        with open(file, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise DefinitionError(f"cannot read the file: {exc.strerror or exc}", file=file) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DefinitionError(f"not valid TOML: {exc}", file=file) from None


def load_providers(path: str | os.PathLike[str]) -> list[Provider]:
    """The named providers of a definitions file's `[[provider]]` tables (none without)."""
    from tether.parent.providers.tables import providers_from_document

    file = os.fspath(path)
    return providers_from_document(_read(file), file=file)


def register_providers(
    providers: ProviderRegistry,
    path: str | os.PathLike[str] | None,
    definitions: Iterable[SubagentDefinition] = (),
) -> ProviderRegistry:
    """`providers` (a supervisor's, or a fresh `builtin_providers()`) with the `[[provider]]`
    tables of the definitions file `path` registered (a table may replace a built-in one);
    raises `ValueError` (bad usage, found before anything runs) when one of `definitions`
    names a provider that is neither built in nor a table of the file."""
    from tether.parent.run.provider import split_spec

    if path is not None:
        for named in load_providers(path):
            providers.register(named, replace=True)
    for definition in definitions:
        name = split_spec(definition.provider)[0]
        if name not in providers:
            raise ValueError(
                f"{path or 'the definitions'}: agent {definition.type!r} names provider "
                f"{name!r}, which is neither built in nor a [[provider]] of the file "
                f"({providers.listing()})"
            )
    return providers


def load_definitions(
    path: str | os.PathLike[str], *, base: Iterable[SubagentDefinition] = BUILTIN_ROLES
) -> list[SubagentDefinition]:
    """Read a definitions file; raise `DefinitionError` saying precisely what is wrong."""
    file = os.fspath(path)
    return definitions_from_document(_read(file), file=file, base=base)


def definitions_from_document(
    doc: dict[str, Any],
    *,
    file: str | None = None,
    base: Iterable[SubagentDefinition] = BUILTIN_ROLES,
) -> list[SubagentDefinition]:
    """The definitions of a parsed TOML document (see the module docstring)."""
    for key in doc:
        if key not in ("agent", "provider"):
            raise DefinitionError(
                "unknown top-level key; a definitions file holds [[agent]] and [[provider]] tables",
                file=file,
                key=key,
            )
    tables = doc.get("agent", [])
    if isinstance(tables, dict):
        raise DefinitionError(
            "expected [[agent]] tables (an array of tables), found a single [agent] table",
            file=file,
            key="agent",
        )
    if not isinstance(tables, list):
        raise DefinitionError(
            f"expected [[agent]] tables, found a {type(tables).__name__}", file=file, key="agent"
        )
    inherited = {d.type: d for d in base}
    seen: dict[str, int] = {}
    out: list[SubagentDefinition] = []
    for index, table in enumerate(tables):
        if not isinstance(table, dict):
            raise DefinitionError(
                f"expected a table, found a {type(table).__name__}", file=file, index=index
            )
        name = table.get("type")
        if isinstance(name, str) and name in seen:
            raise DefinitionError(
                f"duplicate type {name!r}: already defined by [[agent]] #{seen[name] + 1}",
                file=file,
                index=index,
                type=name,
                key="type",
            )
        merged = dict(table)
        if isinstance(name, str) and name in inherited:
            # Unknown keys are checked on the table itself, then the role fills in the rest.
            check_keys(table, file=file, index=index)
            merged = {**_builtins(inherited[name]), **table}
        definition = definition_from_mapping(merged, file=file, index=index)
        seen[definition.type] = index
        out.append(definition)
    return out


def load_registry(
    path: str | os.PathLike[str], *, base: Iterable[SubagentDefinition] = BUILTIN_ROLES
) -> Registry:
    return Registry(load_definitions(path, base=base))


def _builtins(d: SubagentDefinition) -> dict[str, Any]:
    return {k: v for k, v in msgspec.to_builtins(d).items() if v is not None}


# --- writing ----------------------------------------------------------------------------------


def dump_definitions(
    definitions: Iterable[SubagentDefinition],
    *,
    base: Iterable[SubagentDefinition] = BUILTIN_ROLES,
) -> str:
    """A definitions file that `load_definitions(..., base=base)` reads back as the same
    definitions: each table gives the keys that differ from what loading would fill in (the
    built-in role of the same type, or the defaults)."""
    inherited = {d.type: _builtins(d) for d in base}
    chunks = []
    for d in definitions:
        values = msgspec.to_builtins(d)
        reference = inherited.get(d.type) or _defaults()
        lines = ["[[agent]]", f"type = {_value(d.type)}"]
        for key in KEYS:
            if key == "type":
                continue
            value = values.get(key)
            if value == reference.get(key):
                continue
            if value is None:
                raise ValueError(
                    f"{d.type}: {key} cannot be unset in a file where the role {d.type!r} sets it"
                )
            lines.append(f"{key} = {_value(value)}")
        chunks.append("\n".join(lines) + "\n")
    return "\n".join(chunks)


def _defaults() -> dict[str, Any]:
    """What loading fills in for a key a table leaves out (the required keys have nothing)."""
    got = msgspec.to_builtins(SubagentDefinition(type="x", description="x"))
    return {k: v for k, v in got.items() if v is not None and k not in ("type", "description")}


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _string(s: str) -> str:
    """A TOML basic string (multi-line when `s` has newlines): `\\`, `"` and control
    characters escaped; surrogates cannot be written at all."""
    multiline = "\n" in s
    out = []
    for ch in s:
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            raise ValueError("a lone surrogate cannot be written to TOML")
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n" and multiline:
            out.append("\n")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    body = "".join(out)
    # After the opening quotes of a multi-line string, a newline is dropped: start with one.
    return f'"""\n{body}"""' if multiline else f'"{body}"'
