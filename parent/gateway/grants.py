"""Capability tokens: what one foreign child may spend through the gateway, and what it spent.

A `Grant` is minted per child. Its token is the only credential the child gets (in place of an
API key, in `ANTHROPIC_API_KEY`, `OPENAI_API_KEY` or a config file); it names the run, the
provider that answers for it, the budgets its calls draw from, the `Quota` of the gateway it
may hold (connections, request bytes) and a ledger of what the parent metered. The real key
stays in the provider, in the parent.

Budgets are the run's own mechanism (`tether.parent.run.budget`): a call reserves its cost on
every budget of the grant when it is admitted — one turn on a turn budget, the parent's upper
estimate of its tokens on a token budget — and settles with what the provider reported when
it is answered (or releases it when it fails). So calls sent together are held to a budget
exactly as calls sent one by one are: no interleaving gets more through. A grant's budgets are
its own token budget (`budget=`) and any it shares with others (`budgets=`: a run's, a
delegation tree's). A grant whose provider is a run's broker (the `acp` provider) needs none:
the broker reserves on the run's budgets itself.

Tokens are looked up by their SHA-256 digest and then compared with `hmac.compare_digest`, so
the time a lookup takes says nothing about how close a guess was. A revoked or unknown token
is refused the same way.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tether.parent.gateway.http import Quota
from tether.parent.models import ModelProvider
from tether.parent.run.budget import Budget, turn_costs
from tether.protocol.messages import ModelCompleteParams, Usage

TOKEN_PREFIX = "tether-cap-"
OWN_BUDGET = "this sub-agent's token budget"
"""How a grant's own token budget is named when it refuses a call."""

UsageCallback = Callable[["Grant", Usage], None]
"""Called once per metered model call with the grant and that call's usage (the ledger)."""


@dataclass(eq=False)
class Grant:
    """One child's capability; also the `Meter` the ACP driver reads its usage from."""

    run_id: str
    provider: ModelProvider
    token: str = field(repr=False)
    budgets: tuple[Budget, ...] = ()
    """Every budget its calls draw from (see the module docstring)."""
    own_budget: Budget | None = None
    """Its own token budget (also in `budgets`), if it has one."""
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
    def budget(self) -> int | None:
        """The total of its own token budget, if it has one."""
        return None if self.own_budget is None else self.own_budget.total

    @property
    def exhausted(self) -> bool:
        """A budget it draws from is spent: its calls are being refused."""
        return any(b.spent for b in self.budgets)

    def draws(self, params: ModelCompleteParams) -> list[tuple[Budget, int]]:
        """What one call reserves: a turn on a turn budget, its estimated tokens on a token
        budget."""
        return turn_costs(self.budgets, params, getattr(self.provider, "max_tokens", None))

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
        budgets: Sequence[Budget] = (),
        max_in_flight: int = 8,
        quota: Quota | None = None,
        on_usage: UsageCallback | None = None,
    ) -> Grant:
        """A new grant; `budget`: its own token budget, `budgets`: budgets it shares."""
        own = Budget(budget, "tokens", OWN_BUDGET) if budget is not None else None
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        grant = Grant(
            run_id=run_id,
            provider=provider,
            token=token,
            budgets=tuple(dict.fromkeys((*([own] if own else []), *budgets))),
            own_budget=own,
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
