"""Model calls from every node, answered in the driver: the relay actor and the driver's side.

Theory of operation
-------------------
No node holds a model provider, a key, an approval policy or a parent tool. A node's child asks
its host's local supervisor (`model/complete`, `tool/approve`, `tool/call`) exactly as it would
locally; the host answers through forwarding stand-ins (`nodehost.py`) that call
`BrokerRelay.ask` on a small actor pinned to the driver's node. The relay holds nothing but a
queue: the driver long-polls it (`pull`), answers each request in its own process with the
run's own providers and policy (`DriverBroker`), and hands the answers back (`answer`). So the
keys stay in the driver process, the relay can be killed without losing a secret, and any
provider works (nothing has to be pickled). The relay and the hosts are owned by the driver:
when the driver dies, the engine ends them with it.

The driver re-checks every request against the run it names: the model is selected from the
providers the driver resolved for that run (`RunModels.select`), an unknown run is refused.
Budgets are enforced by the node's local broker, which counts the answers (as locally); the
driver counts too, so a run lost with its node still reports the usage it was served.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from tether.parent.placement.wire import Answer, Ask
from tether.parent.run.broker import (
    ApprovePolicy,
    Brokered,
    ParentTool,
    RunModels,
    TurnHook,
    call_parent_tool,
)
from tether.protocol import ErrorCode, RemoteError, WireError
from tether.protocol.messages import (
    ModelCompleteParams,
    ModelCompleteResult,
    ToolApproveParams,
    ToolApproveResult,
    ToolCallParams,
    ToolCallResult,
)

log = logging.getLogger("tether.parent")

PULL_BATCH = 256
PULL_WAIT = 1.0
PULL_RETRY = 0.5


def _relay_is_gone(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"RayActorError", "ActorDiedError", "OwnerDiedError"})


class BrokerRelay:
    """The relay actor's body (made a Ray actor by the driver, `ray.remote(BrokerRelay)`)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._queue: deque[Ask] = deque()
        self._pending: dict[int, list[Any]] = {}
        self._wake: anyio.Event | None = None

    def _woken(self) -> anyio.Event:
        if self._wake is None:
            self._wake = anyio.Event()
        return self._wake

    async def ask(self, run_id: str, method: str, params: Any) -> Answer:
        """Called by a node host: wait for the driver's answer."""
        ask = Ask(next(self._ids), run_id, method, params)
        done = anyio.Event()
        self._pending[ask.id] = [done, None]
        self._queue.append(ask)
        self._woken().set()
        try:
            await done.wait()
            answer: Answer = self._pending[ask.id][1]
            return answer
        finally:
            self._pending.pop(ask.id, None)

    async def pull(self, limit: int = PULL_BATCH, wait: float = PULL_WAIT) -> list[Ask]:
        """Called by the driver: the requests waiting (at most `limit`), after waiting up to
        `wait` seconds for the first."""
        if not self._queue:
            with anyio.move_on_after(wait):
                await self._woken().wait()
        self._wake = None
        out: list[Ask] = []
        while self._queue and len(out) < limit:
            ask = self._queue.popleft()
            if ask.id in self._pending:  # its asker may have given up
                out.append(ask)
        return out

    async def answer(self, answers: Sequence[Answer]) -> None:
        for answer in answers:
            slot = self._pending.get(answer.id)
            if slot is not None:
                slot[1] = answer
                slot[0].set()

    async def ping(self) -> bool:
        return True


@dataclass
class RunContext:
    """What the driver answers one run's child with."""

    models: RunModels
    approve: ApprovePolicy | None = None
    tools: dict[str, ParentTool] = field(default_factory=dict)
    on_turn: TurnHook | None = None
    brokered: Brokered = field(default_factory=Brokered)


class DriverBroker:
    """The driver's side of the relay: the runs it answers for, and the pump."""

    def __init__(self) -> None:
        self.runs: dict[str, RunContext] = {}

    async def pump(self, relay: Any) -> None:
        """Pull requests from the relay and answer each in a task of its own, forever (the
        placement's task group cancels it on close)."""
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    asks: list[Ask] = await relay.pull.remote()
                except Exception as exc:
                    if _relay_is_gone(exc):
                        # Nothing can be brokered any more: the nodes' model calls fail (as
                        # model errors) and their runs end as results.
                        log.error("the broker relay is gone: %s", type(exc).__name__)
                        return
                    log.warning("pulling from the broker relay failed", exc_info=exc)
                    await anyio.sleep(PULL_RETRY)
                    continue
                for ask in asks:
                    tg.start_soon(self._serve, relay, ask)

    async def _serve(self, relay: Any, ask: Ask) -> None:
        answer = await self.answer(ask)
        try:
            await relay.answer.remote([answer])
        except Exception as exc:  # the relay is gone; the asker's call fails on its side
            log.warning("answering run %s failed: %s", ask.run_id, type(exc).__name__)

    async def answer(self, ask: Ask) -> Answer:
        ctx = self.runs.get(ask.run_id)
        if ctx is None:
            return Answer(ask.id, error=(ErrorCode.INVALID_PARAMS, f"no run {ask.run_id!r} here"))
        try:
            result = await self._dispatch(ctx, ask)
        except (WireError, RemoteError) as exc:
            return Answer(ask.id, error=(exc.code, exc.message))
        return Answer(ask.id, result=result)

    async def _dispatch(self, ctx: RunContext, ask: Ask) -> Any:
        params = ask.params
        if ask.method == "model/complete" and isinstance(params, ModelCompleteParams):
            return await self._complete(ctx, ask.run_id, params)
        if ask.method == "tool/approve" and isinstance(params, ToolApproveParams):
            return await self._approve(ctx, ask.run_id, params)
        if ask.method == "tool/call" and isinstance(params, ToolCallParams):
            return await self._call(ctx, ask.run_id, params)
        raise WireError(ErrorCode.METHOD_NOT_FOUND, f"the driver does not serve {ask.method!r}")

    async def _complete(
        self, ctx: RunContext, run_id: str, params: ModelCompleteParams
    ) -> ModelCompleteResult:
        provider = ctx.models.select(params.model, params.purpose)
        try:
            result = await provider.complete(params)
        except (RemoteError, WireError):
            raise
        except Exception as exc:
            log.error("run %s: the model provider failed", run_id, exc_info=exc)
            raise WireError(
                ErrorCode.MODEL_ERROR, f"the model provider failed: {type(exc).__name__}"
            ) from None
        b = ctx.brokered
        b.model_calls += 1
        if params.purpose == "turn":
            b.turns += 1
        b.input_tokens += max(0, result.usage.input_tokens)
        b.output_tokens += max(0, result.usage.output_tokens)
        if params.purpose == "turn" and ctx.on_turn is not None:
            await ctx.on_turn(params, result)  # before the child sees the answer
        return result

    async def _approve(
        self, ctx: RunContext, run_id: str, params: ToolApproveParams
    ) -> ToolApproveResult:
        if ctx.approve is None:
            return ToolApproveResult(allow=True, reason="allowed by the default policy")
        try:
            got = ctx.approve(params)
            if not isinstance(got, ToolApproveResult):
                got = await got
        except Exception as exc:
            log.error("run %s: the approval policy failed", run_id, exc_info=exc)
            raise WireError(ErrorCode.INTERNAL_ERROR, "the parent failed to answer") from None
        return got

    async def _call(self, ctx: RunContext, run_id: str, params: ToolCallParams) -> ToolCallResult:
        return await call_parent_tool(ctx.tools, run_id, ctx.brokered, params)


def forwarding_error(answer: Answer) -> RemoteError | None:
    """The error a node's stand-in raises for a refused answer (its local broker passes the
    code and message on to the child, as for a local refusal)."""
    if answer.error is None:
        return None
    code, message = answer.error
    return RemoteError(code, message)


AskFn = Callable[[str, Any], Any]
