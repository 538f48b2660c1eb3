"""Capability tokens: what one foreign child may spend through the gateway, and what it spent.

A `Grant` is minted per child. Its token is the only credential the child gets (in place of an
API key, in `ANTHROPIC_API_KEY`, `OPENAI_API_KEY` or a config file); it names the run, the
provider that answers for it, an optional budget of tokens, the `Quota` of the gateway it may
hold (connections, request bytes) and a ledger of what the parent metered. The real key stays
in the provider, in the parent.

Tokens are looked up by their SHA-256 digest and then compared with `hmac.compare_digest`, so
the time a lookup takes says nothing about how close a guess was. A revoked or unknown token
is refused the same way.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tether.parent.gateway.http import Quota
from tether.parent.models import ModelProvider
from tether.protocol.messages import Usage

TOKEN_PREFIX = "tether-cap-"

UsageCallback = Callable[["Grant", Usage], None]
"""Called once per metered model call with the grant and that call's usage (the ledger)."""


@dataclass(eq=False)
class Grant:
    """One child's capability; also the `Meter` the ACP driver reads its usage from."""

    run_id: str
    provider: ModelProvider
    token: str = field(repr=False)
    budget: int | None = None
    """The most input + output tokens the child may use; calls stop once it is spent."""
    max_in_flight: int = 8
    """Concurrent calls past this are refused (429) rather than queued."""
    quota: Quota = field(default_factory=Quota)
    """What of the gateway it may hold at once: connections, bytes of requests."""
    on_usage: UsageCallback | None = None
    usage: Usage = field(default_factory=Usage)
    calls: int = 0
    """Model calls answered."""
    refused: int = 0
    """Calls refused (budget, concurrency)."""
    in_flight: int = 0
    last_active: float = field(default_factory=time.monotonic)
    revoked: bool = False

    @property
    def spent(self) -> int:
        return self.usage.input_tokens + self.usage.output_tokens

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.spent >= self.budget

    def record(self, usage: Usage) -> None:
        """Meter one answered call."""
        self.usage = Usage(
            input_tokens=self.usage.input_tokens + usage.input_tokens,
            output_tokens=self.usage.output_tokens + usage.output_tokens,
        )
        self.calls += 1
        if self.on_usage is not None:
            self.on_usage(self, usage)


class GrantTable:
    """The live grants of one gateway, by token digest."""

    def __init__(self) -> None:
        self._by_digest: dict[bytes, Grant] = {}

    def mint(
        self,
        run_id: str,
        provider: ModelProvider,
        *,
        budget: int | None = None,
        max_in_flight: int = 8,
        quota: Quota | None = None,
        on_usage: UsageCallback | None = None,
    ) -> Grant:
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        grant = Grant(
            run_id=run_id,
            provider=provider,
            token=token,
            budget=budget,
            max_in_flight=max_in_flight,
            quota=quota or Quota(),
            on_usage=on_usage,
        )
        self._by_digest[_digest(token)] = grant
        return grant

    def revoke(self, grant: Grant) -> None:
        grant.revoked = True
        self._by_digest.pop(_digest(grant.token), None)

    def find(self, presented: str | None) -> Grant | None:
        """The live grant whose token is `presented`, else `None`."""
        if not presented:
            return None
        grant = self._by_digest.get(_digest(presented))
        if grant is None or grant.revoked:
            return None
        if not hmac.compare_digest(grant.token.encode(), presented.encode()):
            return None
        return grant

    def __len__(self) -> int:
        return len(self._by_digest)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).digest()
