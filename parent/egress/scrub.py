"""Keep an injected credential out of what a server sends back to the child.

A server may echo the request's headers (an echo endpoint, an error message quoting the token
it refused). The proxy asks credential destinations for an unencoded body
(`Accept-Encoding: identity`) and passes every response header and body byte through a
`Scrubber`, which overwrites each occurrence of a secret with as many `*` (the length stays,
so a `Content-Length` stays true), also when it is split across reads: it holds back the last
`len(secret) - 1` bytes of a read until the next one or the end. What a server encodes
(base64, its own compression against the request's wish) cannot be recognised; the docs say
so.
"""

from __future__ import annotations

from collections.abc import Sequence


class Scrubber:
    """Streams bytes with every occurrence of `secrets` overwritten (see the module
    docstring). `feed(data)` returns what may be sent now; `end()` what is held back."""

    def __init__(self, secrets: Sequence[bytes]) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._keep = max((len(s) for s in self.secrets), default=1) - 1
        self._held = b""
        self.hits = 0
        """Occurrences overwritten so far."""

    def clean(self, data: bytes) -> bytes:
        """`data` with every whole occurrence overwritten (no carrying)."""
        for secret in self.secrets:
            if secret in data:
                self.hits += data.count(secret)
                data = data.replace(secret, b"*" * len(secret))
        return data

    def feed(self, data: bytes) -> bytes:
        if not self.secrets:
            return data
        joined = self.clean(self._held + data)
        if self._keep == 0:
            self._held = b""
            return joined
        cut = max(0, len(joined) - self._keep)
        self._held = joined[cut:]
        return joined[:cut]

    def end(self) -> bytes:
        held, self._held = self._held, b""
        return held


__all__ = ["Scrubber"]
