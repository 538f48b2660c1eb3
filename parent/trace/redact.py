"""Keys and capability tokens kept out of a trace, whatever text they turn up in.

The trace records what the child sent and what the model answered — never the parent's own
request headers — so a key reaches a trace only if a model, a tool or a hostile child puts
it in the conversation. `Redactor` is the second wall: each line is searched for the value of
each secret the parent holds (its environment's secret-looking variables, the child config's
explicit ones, the model providers' authentication headers, capability tokens the run was
given) in every form it can take in a line — as is, JSON-escaped once (inside a string) and
twice (inside JSON text inside a string, as a tool's result carries it), escaped the way tether
writes JSON or the way ASCII-only writers do. A line where one is
found is decoded, each occurrence in any string (JSON text inside a string included) is
replaced by `[redacted]`, and the line is encoded again: replacing bytes in place could cut an
escape sequence in two. Values shorter than `MIN_SECRET` characters are not searched for: they
would match ordinary text.

The trace format's own words (its field names and the values of its fixed fields: `assistant`,
`end_turn`, `toolCalls`, ...) are left as they are wherever a string is exactly one of them:
replacing a secret inside one would make the line no trace line (a role of `[redacted]t`), and
a secret that is part of a word every line carries is no secret from a trace's reader anyway.
Every other string is scrubbed, the same words inside longer text included.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from tether.parent.process.env import looks_secret
from tether.parent.trace.schema import build_schema

MIN_SECRET = 8
REDACTED = "[redacted]"


@functools.cache
def format_words() -> frozenset[str]:
    """The trace format's own words: every field name and every fixed value (an enum's, a
    tag's) of its JSON Schema."""
    words: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            words.update(node.get("properties", {}))
            words.update(v for v in node.get("enum", ()) if isinstance(v, str))
            if isinstance(node.get("const"), str):
                words.add(node["const"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(build_schema())
    return frozenset(words)


def _escaped(text: str) -> str:
    return msgspec.json.encode(text).decode()[1:-1]


def _ascii(text: str) -> str:
    return json.dumps(text)[1:-1]


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._needles: list[bytes] = []
        """Every form of every secret as it can appear in an encoded line."""
        self._texts: list[str] = []
        """Every form of every secret as it can appear in a decoded string."""
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> None:
        """Keep `secret` out of every line from now on."""
        if not isinstance(secret, str) or len(secret) < MIN_SECRET:
            return
        # As JSON text carries it (escaped as tether writes JSON, or as ASCII-only JSON
        # writers do), and that again inside JSON text.
        once = {_escaped(secret), _ascii(secret)}
        forms = {secret, *once, *(_escaped(o) for o in once), *(_ascii(o) for o in once)}
        # Longest first: a secret holding another is replaced whole.
        self._texts = sorted(set(self._texts) | forms, key=len, reverse=True)
        needles = set(self._needles) | {_escaped(f).encode() for f in forms}
        self._needles = sorted(needles, key=len, reverse=True)

    def __len__(self) -> int:
        return len(self._texts)

    def __call__(self, line: bytes) -> bytes:
        """`line` (one encoded JSON value, `\\n`-terminated or not) without any secret."""
        if not any(needle in line for needle in self._needles):
            return line
        end = b"\n" if line.endswith(b"\n") else b""
        return msgspec.json.encode(self._scrub(msgspec.json.decode(line))) + end

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            if value in format_words():
                return value  # the format's own word (see the module docstring)
            for text in self._texts:
                if text in value:
                    value = value.replace(text, REDACTED)
            return value
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        if isinstance(value, dict):
            return {self._scrub(k): self._scrub(v) for k, v in value.items()}
        return value


def parent_secrets(
    environ: Mapping[str, str],
    explicit: Mapping[str, str] = {},
    providers: Iterable[object] = (),
) -> list[str]:
    """The secrets a run's trace is kept clear of: the values of secret-looking variables of
    the parent's environment and of the child's explicit environment, and the values of the
    providers' secret-looking request headers (`headers()`; a `Bearer` value also without
    its scheme)."""
    found = [v for k, v in environ.items() if looks_secret(k)]
    found += [v for k, v in explicit.items() if looks_secret(k)]
    for provider in providers:
        headers = getattr(provider, "headers", None)
        if not callable(headers):
            continue
        try:
            got = headers()
        except Exception:
            continue
        if not isinstance(got, Mapping):
            continue
        for name, value in got.items():
            if isinstance(name, str) and isinstance(value, str) and looks_secret(name):
                found.append(value)
                scheme, _, rest = value.partition(" ")
                if rest and scheme.lower() in ("bearer", "basic", "token"):
                    found.append(rest)
    return found
