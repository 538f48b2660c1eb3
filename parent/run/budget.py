"""Budgets that model turns draw from: reserved when a turn is admitted, settled when it is
answered — so turns sent together can never pass a limit that turns sent one by one meet.

Theory of operation
-------------------
A `Budget` is a number of units that one or more runs share: a run's own iteration budget
(`maxIterations` turns) and token budget, a continuable agent's total, a delegation tree's
tokens, a gateway grant's tokens. It counts what is *settled* (answered turns, their tokens as
the parent counted them) and what is *reserved* by turns in flight.

Before the parent sends a turn to a model it asks `admit()` for every budget the turn draws
from, each with the turn's cost on it (1 for a turn budget; for a token budget an estimate the
parent makes from the request it holds: `estimate_tokens`). The rule, per budget:

    spent      settled >= total                       → refused (`Spent`, with the reason)
    fits       nothing in flight, or
               settled + reserved + cost <= total      → reserved
    otherwise  the turn waits until a turn in flight settles or is released, then asks again

and a turn is admitted only when every budget it draws from admits it, all at once (no budget
is reserved while the turn waits on another, so waiting holds nothing up). A turn with nothing
in flight beside it is admitted while anything is left, exactly as a run that sends one turn
at a time always was (its last turn may overrun the budget by that turn's own size, as
before); a turn sent beside others is admitted only if every reservation fits. So for a turn
budget — cost 1, exact — no interleaving of concurrent requests ever admits more than `total`
turns; for a token budget the tokens answered never pass `total` by more than one turn's size
plus what the estimates fell short of the real counts (the estimate errs high: the whole
request's text and the model's whole output allowance).

When the model answers, `Admission.settle(tokens)` replaces each reservation with what the turn
really cost; a turn that failed or was cancelled is `release()`d (nothing was counted, as
before). A budget that becomes spent on a settle tells its `on_spent` listeners (a delegation
ends its live sub-agents then). One event loop owns a budget; no lock is needed because each
check-and-reserve happens without a checkpoint in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import anyio

from tether.protocol.messages import ModelCompleteParams

Unit = Literal["turns", "tokens"]
DEFAULT_OUTPUT_RESERVE = 4096
"""Tokens a turn reserves for the model's answer when its provider states no `max_tokens`."""


class Spent(Exception):
    """A budget the turn draws from is used up; the message says which and how."""

    def __init__(self, budget: Budget, message: str) -> None:
        super().__init__(message)
        self.budget = budget


@dataclass(eq=False)
class Budget:
    """`total` units shared by whoever draws from it; see the module docstring. `label` names
    it in refusals ("the run's token budget", "the token budget of the whole tree")."""

    total: int
    unit: Unit = "tokens"
    label: str = "budget"
    settled: int = 0
    reserved: int = 0
    in_flight: int = 0
    on_spent: list[Callable[[str], None]] = field(default_factory=list)
    _changed: anyio.Event | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.total, bool) or self.total < 0:
            raise ValueError(
                f"{self.label}: a budget is zero or more {self.unit}, not {self.total}"
            )

    @property
    def spent(self) -> bool:
        return self.settled >= self.total

    @property
    def remaining(self) -> int:
        """What is neither settled nor reserved."""
        return max(0, self.total - self.settled - self.reserved)

    def why_spent(self) -> str:
        if self.unit == "turns":
            return f"{self.label} of {self.total} turns is used up"
        return f"{self.label} is spent ({self.settled} of {self.total} tokens used)"

    def fits(self, cost: int) -> bool:
        return self.in_flight == 0 or self.settled + self.reserved + cost <= self.total

    def count(self, units: int) -> None:
        """Settle `units` that were never reserved (usage reported after the fact, such as a
        foreign agent's own count that only the gateway saw)."""
        self._settle(0, max(0, units))

    def _reserve(self, cost: int) -> None:
        self.reserved += cost
        self.in_flight += 1

    def _settle(self, reserved: int, used: int) -> None:
        was_spent = self.spent
        self.reserved -= reserved
        self.settled += used
        self._pulse()
        if self.spent and not was_spent:
            why = self.why_spent()
            for listener in list(self.on_spent):
                try:
                    listener(why)
                except Exception:  # a listener's bug must not break the turn that settled
                    pass

    def _unreserve(self, reserved: int) -> None:
        self.reserved -= reserved
        self.in_flight -= 1
        self._pulse()

    def _pulse(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _wait_event(self) -> anyio.Event:
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed


class Admission:
    """The reservations of one admitted turn: `settle()` once it is answered, else
    `release()`; each may be called once (later calls do nothing)."""

    def __init__(self, held: Sequence[tuple[Budget, int]]) -> None:
        self._held = list(held)

    def settle(self, tokens: int, turns: int = 1) -> None:
        held, self._held = self._held, []
        for budget, cost in held:
            budget.in_flight -= 1
            budget._settle(cost, turns if budget.unit == "turns" else max(0, tokens))

    def release(self) -> None:
        held, self._held = self._held, []
        for budget, cost in held:
            budget._unreserve(cost)


async def admit(draws: Iterable[tuple[Budget, int]]) -> Admission:
    """Reserve `cost` on every budget at once, waiting while one cannot fit beside the turns in
    flight; raises `Spent` as soon as any of them is used up (see the module docstring)."""
    wanted = [(b, max(0, c)) for b, c in draws]
    while True:
        admission = _reserve_all(wanted)
        if admission is not None:
            return admission
        await next(b for b, c in wanted if not b.fits(c))._wait_event().wait()


def admit_now(draws: Iterable[tuple[Budget, int]]) -> Admission | None:
    """`admit` without waiting: the admission when every budget fits now, `None` when one of
    them would make the turn wait (then `await admit(...)`); raises `Spent` likewise. Most turns
    fit at once, and this costs them no coroutine."""
    return _reserve_all([(b, max(0, c)) for b, c in draws])


def _reserve_all(wanted: list[tuple[Budget, int]]) -> Admission | None:
    for budget, _ in wanted:
        if budget.spent:
            raise Spent(budget, budget.why_spent())
    if not all(b.fits(c) for b, c in wanted):
        return None
    for budget, cost in wanted:
        budget._reserve(cost)
    return Admission(wanted)


def turn_costs(
    budgets: Iterable[Budget], params: ModelCompleteParams, output_reserve: int | None
) -> list[tuple[Budget, int]]:
    """What one turn reserves on each of `budgets`: 1 on a turn budget, its estimated tokens on
    a token budget (`estimate_tokens`, a pass over the whole request, made only when one of
    them counts tokens)."""
    wanted = list(budgets)
    if not any(b.unit == "tokens" for b in wanted):
        return [(b, 1) for b in wanted]
    tokens = estimate_tokens(params, output_reserve)
    return [(b, 1 if b.unit == "turns" else tokens) for b in wanted]


def estimate_tokens(params: ModelCompleteParams, output_reserve: int | None) -> int:
    """An upper estimate of one turn's tokens from the request the parent holds: every
    message's text and tool-call arguments at one token per four characters (rounded up per
    message), the tools' schemas likewise, plus the model's output allowance."""
    chars = 0
    pieces = 0
    for m in params.messages:
        chars += len(m.content)
        pieces += 1
        for call in m.tool_calls:
            chars += len(call.name) + len(str(call.arguments))
            pieces += 1
    for tool in params.tools:
        chars += len(tool.name) + len(tool.description) + len(str(tool.input_schema))
        pieces += 1
    reserve = DEFAULT_OUTPUT_RESERVE if output_reserve is None else max(0, output_reserve)
    return chars // 4 + pieces + reserve
