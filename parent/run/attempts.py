"""Several attempts at one task (`Supervisor.run(..., attempts=N)`): N runs of the same spec at
once, each in a layer of its own, one taken.

Theory of operation
-------------------
`run_attempts(sup, spec)` plans and starts N runs of `spec` (`workspace_mode="layered"`,
each with `apply="never"`: nothing reaches the workspace before one is taken), so each is a
run like any other — its own child, limits and budgets, its own ledger of turns — and waits for
all of them, noting the order they finished in. The attempt taken is the one `spec.choose`
names from their results (in attempt order), else the first to succeed in finishing order. Its
change set is applied as `spec.apply` says (`on_success`: applied; `never`: kept, for
`Supervisor.apply`), every other attempt's layer is discarded. A spec that cannot be planned
fails before any attempt starts; a cancelled caller disposes of every attempt first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import anyio
import msgspec

from tether.parent.run.handle import RunHandle
from tether.parent.run.spec import RunSpec
from tether.protocol.messages import (
    ApplyOutcome,
    ApplyPolicy,
    Attempts,
    ChangeSet,
    Failure,
    RunResult,
)

MAX_ATTEMPTS = 8


class AttemptHost(Protocol):
    async def start(self, spec: RunSpec | str | None = None, /) -> RunHandle: ...

    async def apply(
        self, result: RunResult | ChangeSet, *, policy: ApplyPolicy = "never"
    ) -> ApplyOutcome: ...

    async def discard(self, result: RunResult | ChangeSet) -> ApplyOutcome: ...


def check_attempts(n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_ATTEMPTS:
        raise ValueError(f"attempts must be a whole number from 1 to {MAX_ATTEMPTS}, not {n!r}")
    return n


def default_choice(results: Sequence[RunResult], finished: Sequence[int]) -> tuple[int | None, str]:
    """The first attempt to succeed, in finishing order."""
    for i in finished:
        if results[i].success:
            return i, f"attempt {i + 1} was the first to succeed"
    return None, "no attempt succeeded"


async def run_attempts(sup: AttemptHost, spec: RunSpec) -> RunResult:
    n = check_attempts(spec.attempts)
    if spec.apply not in ("never", "on_success"):
        raise ValueError(f"apply={spec.apply!r}: attempts know never and on_success")
    one = spec.replace(attempts=1, choose=None, workspace_mode="layered", apply="never")
    handles: list[RunHandle] = []
    try:
        for i in range(n):
            run_id = f"{spec.run_id}-a{i + 1}" if spec.run_id else None
            handles.append(await sup.start(one.replace(run_id=run_id)))
    except BaseException:
        with anyio.CancelScope(shield=True):
            for handle in handles:
                handle.abort()
            for handle in handles:
                await handle.wait()
        raise
    results: list[RunResult | None] = [None] * n
    finished: list[int] = []

    async def wait(i: int, handle: RunHandle) -> None:
        results[i] = await handle.result()
        finished.append(i)

    try:
        async with anyio.create_task_group() as tg:
            for i, handle in enumerate(handles):
                tg.start_soon(wait, i, handle)
    except BaseException:
        with anyio.CancelScope(shield=True):
            for handle in handles:
                handle.abort()
            for handle in handles:
                await handle.wait()
        raise
    got = [r for r in results if r is not None]
    assert len(got) == n
    if spec.choose is not None:
        try:
            taken = spec.choose(got)
            why = (
                f"choose() picked attempt {taken + 1}"
                if taken is not None
                else "choose() picked none"
            )
        except Exception as exc:  # the caller's callback: its failure is told, not raised
            taken, why = None, f"choose() failed: {type(exc).__name__}: {exc}"
        if taken is not None and not 0 <= taken < n:
            taken, why = None, f"choose() answered {taken}, not an attempt (0 to {n - 1})"
    else:
        taken, why = default_choice(got, finished)
    with anyio.CancelScope(shield=True):
        for i, result in enumerate(got):
            if i != taken and result.changes is not None:
                await sup.discard(result)
        if taken is None:
            return RunResult(
                success=False,
                status="error",
                message=f"none of the {n} attempts was taken: {why}",
                failure=Failure(kind="agent_error"),
                workspace_mode="layered",
                attempts=Attempts(taken=None, why=why, results=got),
            )
        chosen = got[taken]
        outcome = chosen.applied
        if spec.apply == "on_success" and chosen.success and chosen.changes is not None:
            outcome = await sup.apply(chosen, policy="on_success")
    assert taken is not None
    return msgspec.structs.replace(
        chosen, applied=outcome, attempts=Attempts(taken=taken + 1, why=why, results=got)
    )
