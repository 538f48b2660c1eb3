"""Model calls from every node, answered in the driver: the driver's side.

Theory of operation
-------------------
No node holds a model provider, a key, an approval policy or a parent tool. A node's child asks
its host's local supervisor (`model/complete`, `tool/approve`, `tool/call`) exactly as it would
locally; the host answers through forwarding stand-ins (`nodehost.py`) that put the request
(`Ask`) in the run's own stream of event batches, which the driver is already reading. The
driver answers each request in a task of its own, in its own process, with the run's own
providers and policy (`DriverBroker`), and hands the answer to the host that asked (its actor's
`answer()`). So a request costs two hops of the engine, the keys stay in the driver process, and
any provider works (nothing has to be pickled).

The driver takes the run a request is for from the stream it came on, never from the request,
and re-checks it against that run: the model is selected from the providers the driver resolved
for that run (`RunModels.select`), an unknown run is refused. Budgets are enforced by the node's
local broker, which counts the answers (as locally); the driver counts too, so a run lost with
its node still reports the usage it was served.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class RunContext:
    """What the driver answers one run's child with."""

    models: RunModels
    approve: ApprovePolicy | None = None
    tools: dict[str, ParentTool] = field(default_factory=dict)
    on_turn: TurnHook | None = None
    brokered: Brokered = field(default_factory=Brokered)


class DriverBroker:
    """The driver's answers: the runs it answers for, and what it answers each request with."""

    def __init__(self) -> None:
        self.runs: dict[str, RunContext] = {}

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
