"""An agent's stored transcript while this process holds its lease: each brokered turn, each
report and each activation's end written to the session store before anyone acts on them.

A `Recorder` is bound to an activation (`bind`) with a mirror of what is stored, and keeps the
mirror equal to the child's transcript turn by turn (`transcript.turn_splice`): a turn appends
what is new, or splices from where the child's transcript parts from the stored one. It is the
run's `on_turn` and `on_report` hooks; a spawn starts the child before the session exists, so
the hooks wait until the recorder is bound (or told it never will be).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from tether.parent.agents.sessions import Activation, SessionError, SettledStatus
from tether.parent.agents.transcript import closing_results, turn_splice
from tether.protocol import ErrorCode, WireError
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    Usage,
)

log = logging.getLogger("tether.parent")


class Recorder:
    """The stored transcript of an agent while this process holds its lease: a mirror of what
    is stored, kept equal to the child's transcript turn by turn (see `transcript.py`)."""

    def __init__(self) -> None:
        self.activation: Activation | None = None
        self.stored: list[ChatMessage] = []
        self.counted = Usage()
        """Turn usage stored during the current activation (the rest is stored at its end)."""
        self._bound = anyio.Event()
        self._failed = ""
        self._lock = anyio.Lock()

    async def bind(
        self, activation: Activation, stored: Sequence[ChatMessage], add: Sequence[ChatMessage]
    ) -> None:
        self.activation, self.stored = activation, list(stored)
        if add:
            await self.add(add)
        self._bound.set()

    def fail(self, why: str) -> None:
        self._failed = why
        self._bound.set()

    async def _ready(self) -> Activation:
        await self._bound.wait()
        if self._failed or self.activation is None:
            raise WireError(
                ErrorCode.INTERNAL_ERROR,
                f"the agent's session is not available: {self._failed or 'unbound'}",
            )
        return self.activation

    async def add(self, messages: Sequence[ChatMessage], usage: Usage | None = None) -> None:
        assert self.activation is not None
        await self.activation.append(messages, usage)
        self.stored.extend(messages)

    async def on_turn(self, params: ModelCompleteParams, result: ModelCompleteResult) -> None:
        activation = await self._ready()
        usage = Usage(
            input_tokens=max(0, result.usage.input_tokens),
            output_tokens=max(0, result.usage.output_tokens),
        )
        async with self._lock:
            splice = turn_splice(self.stored, params.messages, result.message)
            try:
                if splice.keep == len(self.stored):
                    await activation.append(splice.add, usage)
                else:
                    await activation.splice(splice.keep, splice.add, usage)
            except SessionError as exc:
                # The turn cannot be stored: the child must not act on it, so the turn fails.
                raise WireError(
                    ErrorCode.INTERNAL_ERROR,
                    f"the parent could not store this turn ({type(exc).__name__}); the "
                    "activation ends",
                ) from None
            self.stored[splice.keep :] = splice.add
            self.counted = plus(self.counted, usage)

    async def on_report(self, text: str) -> None:
        try:
            activation = await self._ready()
            await activation.report(text)
        except Exception as exc:  # a report that cannot be stored must not break the reader
            log.warning("a report could not be stored: %s", exc)

    async def settle(self, result: RunResult) -> None:
        """The activation answered: store how it ended, with results closing the tool calls
        its last turn left open and the usage the turns did not carry (compaction), in one
        transaction."""
        assert self.activation is not None
        async with self._lock:
            closing = closing_results(self.stored, result)
            extra = Usage(
                input_tokens=max(0, result.usage.input_tokens - self.counted.input_tokens),
                output_tokens=max(0, result.usage.output_tokens - self.counted.output_tokens),
            )
            question = result.question if result.status == "needs_input" else None
            await self.activation.settle(
                settled_status(result),
                summary=result.summary or result.message,
                question=question,
                messages=closing,
                usage=extra,
            )
            self.stored.extend(closing)
            self.counted = Usage()

    async def running(self, message: ChatMessage) -> None:
        """A warm follow-up: store it and mark the session running, in one transaction."""
        assert self.activation is not None
        await self.activation.mark_running([message])
        self.stored.append(message)


def settled_status(result: RunResult) -> SettledStatus:
    """The session's status after an activation that answered `result`."""
    if result.status == "needs_input":
        return "needs_input"
    if result.success and result.status == "completed":
        return "idle"
    if result.status == "aborted":
        return "aborted"
    return "failed"


def plus(a: Usage, b: Usage) -> Usage:
    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
    )
