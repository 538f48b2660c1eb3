"""Engine failures as results: what the driver says when the engine lost a run.

Pure: the engine's exception is named by its class (so this module never imports the engine),
and the result is built from what the driver knew of the run when it was lost.
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.parent.run.broker import Brokered
from tether.protocol.messages import Failure, FailureKind, Rung, RunResult, RunStatus

_WHY = {
    "ActorDiedError": "its host actor died",
    "ActorUnavailableError": "its host actor became unreachable (its node or raylet is down)",
    "RayActorError": "its host actor died",
    "NodeDiedError": "its node died",
    "OwnerDiedError": "the driver that owned the run died",
    "ObjectLostError": "the run's events were lost with their node",
    "ObjectFetchTimedOutError": "the run's events could not be fetched from their node",
    "WorkerCrashedError": "the host's worker process crashed",
    "LocalRayletDiedError": "the driver's own raylet died",
    "RaySystemError": "the engine failed",
    "GetTimeoutError": "the engine did not answer in time",
}


def engine_failure(exc: BaseException) -> str:
    """A sentence for an engine exception, from the most specific class that has one."""
    for cls in type(exc).__mro__:
        why = _WHY.get(cls.__name__)
        if why is not None:
            return f"{why} ({type(exc).__name__})"
    return f"the engine failed ({type(exc).__name__})"


def node_label(node_id: str, host: str = "") -> str:
    """How a node is named in a message: a short id, and its host when known."""
    short = node_id[:12]
    return f"{short} ({host})" if host else short


def lost_result(
    run_id: str,
    *,
    node: str,
    why: str,
    rung: Rung | None,
    containment: str | None,
    brokered: Brokered,
    started: bool,
    kind: FailureKind = "placement_lost",
) -> RunResult:
    """The result of a run the engine lost (`placement_lost`), or ended before its host
    answered (`cancelled`, say). `rung`: the last dispose rung the node reported; `None`
    means it reported none, and so the tree was left to the kernel (the PID namespace)."""
    reported = rung or "none"
    status: RunStatus = "aborted" if kind == "cancelled" else "error"
    message = (
        f"the run was lost with node {node}: {why}; the last dispose rung the node reported "
        f"was {reported!r}"
        if kind == "placement_lost"
        else f"{why} (node {node}; the last dispose rung it reported was {reported!r})"
    )
    return RunResult(
        success=False,
        status=status,
        message=message,
        failure=Failure(kind=kind, rung=reported),
        run_id=run_id,
        containment=containment,
        usage=brokered.usage,
        iteration_count=brokered.turns,
        turn_count=1 if started else 0,
    )


def unplaced_result(
    run_id: str, *, kind: FailureKind, message: str, nodes: Iterable[str] = ()
) -> RunResult:
    """A run that never reached a node: no node had room (`spawn_failed`), none is left
    (`placement_lost`), or it was cancelled while it waited (`cancelled`)."""
    named = ", ".join(nodes)
    text = f"{message} (nodes: {named})" if named else message
    return RunResult(
        success=False,
        status="aborted" if kind == "cancelled" else "error",
        message=text,
        failure=Failure(kind=kind, rung="none"),
        run_id=run_id,
    )
