"""Building a run's `RunResult` from the child's answer (if any), what the supervisor observed,
and what the parent brokered.

The parent has the last word on every field it can know itself: the run id, the containment
tier, the usage and model turns it brokered (counted by the broker, whatever the child claims),
the artifacts (looked up again under the workspace, `evidence.check_artifacts`), a verifier's
verdict (parsed from the final text, never copied from the child), the changes to files the
user's own tools run (`sensitive_changes`, measured by the parent: `sensitive.py`), and, for a
failure, the dispose rung it reached and the stderr tail it kept, also when the child's own
answer reports the failure. A child that never answered is classified from what was observed
(`classify`). Whatever raises while the parent builds it is tether's own failure, and the
result says so (`parent_error`): a result is owed whatever happens.
"""

from __future__ import annotations

import msgspec

from tether.parent.process.classify import Observed, classify, explaining_line, failure_of
from tether.parent.run.broker import Brokered
from tether.parent.run.evidence import check_artifacts, parse_verdict
from tether.protocol.messages import (
    AgentRunParams,
    Failure,
    FailureKind,
    Isolation,
    Rung,
    RunResult,
    SensitiveChange,
    TraceReport,
)

VERIFIER = "verifier"
PARENT_ERROR = "tether itself failed building this result"


def build_result(
    params: AgentRunParams,
    *,
    containment: str,
    isolation: Isolation | None = None,
    observed: Observed,
    answer: RunResult | None,
    brokered: Brokered | None,
    prompts: int,
    launcher: str | None = None,
    pid: int | None = None,
    duration_seconds: float | None = None,
    sensitive_changes: list[SensitiveChange] | None = None,
    trace: TraceReport | None = None,
) -> RunResult:
    """The result of one run. `prompts`: user turns the parent sent (the run's prompt, and any
    follow-up messages); `launcher`, `pid`, `duration_seconds`: what the parent saw of the
    run's process; `sensitive_changes`: what the parent saw change among the files the user's
    tools run (`sensitive.py`; whatever the child claimed there is dropped); `trace`: where the
    parent traced it (whatever the child claimed)."""
    if answer is not None:
        result = _from_answer(answer, observed)
        artifacts, skipped = check_artifacts(params.workspace, answer.artifacts, answer.skipped)
        result = msgspec.structs.replace(result, artifacts=artifacts, skipped=skipped)
    else:
        result = _unanswered(observed)
    counted = brokered or Brokered()
    verdict = None
    if params.agent.type == VERIFIER and result.status == "completed":
        verdict = parse_verdict(result.summary)
    result = msgspec.structs.replace(
        result,
        run_id=params.run_id,
        containment=containment,
        isolation=isolation,
        launcher=launcher,
        pid=pid,
        duration_seconds=None if duration_seconds is None else round(duration_seconds, 3),
        usage=counted.usage,
        iteration_count=counted.turns,
        turn_count=prompts,
        verdict=verdict,
        sensitive_changes=list(sensitive_changes or []),
        trace=trace,
    )
    if observed.survivors:
        # The promise is "nothing left running"; when the kernel would not let us keep it (a
        # process stuck in uninterruptible sleep, one we may not signal), say so.
        note = (
            f"{len(observed.survivors)} process(es) of the child's tree could not be killed: "
            f"pids {', '.join(map(str, observed.survivors))}"
        )
        message = f"{result.message}; {note}" if result.message else note
        result = msgspec.structs.replace(result, message=message)
    return result


def _from_answer(answer: RunResult, observed: Observed) -> RunResult:
    if answer.success:
        return answer
    own = answer.failure
    if own is None:
        # Every unsuccessful result names its failure kind, also when the child's own answer
        # left it out (an `aborted` answer to `agent/cancel`, say).
        kind: FailureKind = "cancelled" if answer.status == "aborted" else "agent_error"
        own = Failure(kind=kind)
    # The parent's evidence stands beside the child's account: how far the ladder went, and
    # the last words the child wrote to stderr (a raising agent says "details are on stderr").
    failure = msgspec.structs.replace(
        own,
        rung=observed.rung,
        stderr_tail=own.stderr_tail or observed.stderr_tail,
    )
    return msgspec.structs.replace(answer, failure=failure)


def _unanswered(observed: Observed) -> RunResult:
    got = classify(observed)
    failure = failure_of(observed)
    assert got is not None and failure is not None  # unanswered always classifies
    kind, message = got
    if failure.stderr_tail and kind in ("exit_nonzero", "crashed", "spawn_failed"):
        message = f"{message}: {explaining_line(failure.stderr_tail)[:200]}"
    return RunResult(
        success=False,
        status="aborted" if kind == "cancelled" else "error",
        message=message,
        failure=failure,
    )


def parent_error(exc: BaseException, base: RunResult, *, rung: Rung | None = None) -> RunResult:
    """`base` (what the parent knows of the run whatever failed: its id, what was counted)
    ended as `parent_error`: tether itself failed building the result, `exc` says how. The
    caller logs `exc` with its traceback."""
    # A task group wraps what raised in it: the one exception inside is what to name.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return msgspec.structs.replace(
        base,
        success=False,
        status="error",
        message=f"{PARENT_ERROR}: {type(exc).__name__}: {exc}"[:500],
        failure=Failure(kind="parent_error", rung=rung),
    )
