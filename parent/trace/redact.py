"""Keys and capability tokens kept out of a trace, whatever text they turn up in.

The trace records what the child sent and what the model answered — never the parent's own
request headers — so a key reaches a trace only if a model, a tool or a hostile child puts
it in the conversation. `Redactor` is the second wall: every line is searched for the value of
each secret the parent holds (its environment's secret-looking variables, the child config's
explicit ones, the model providers' authentication headers, capability tokens the run was
given) and each occurrence is replaced by `[redacted]` before the line is written, in every
form it takes in a line: as is, JSON-escaped once (inside a string), and twice (inside JSON
text inside a string, as a tool's result carries it). Values shorter than `MIN_SECRET`
characters are not searched for: they would match ordinary text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from tether.parent.process.env import looks_secret

MIN_SECRET = 8
REDACTED = b"[redacted]"


def _escaped(text: str) -> str:
    return msgspec.json.encode(text).decode()[1:-1]


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._needles: list[bytes] = []
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> None:
        """Keep `secret` out of every line from now on."""
        if not isinstance(secret, str) or len(secret) < MIN_SECRET:
            return
        once = _escaped(secret)
        forms = {secret.encode(), once.encode(), _escaped(once).encode()}
        # Longest first: a secret holding another is replaced whole.
        self._needles = sorted(set(self._needles) | forms, key=len, reverse=True)

    def __len__(self) -> int:
        return len(self._needles)

    def __call__(self, data: bytes) -> bytes:
        for needle in self._needles:
            if needle in data:
                data = data.replace(needle, REDACTED)
        return data


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
