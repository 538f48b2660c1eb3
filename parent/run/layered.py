"""One layered run's layer: made before its child, measured when it answers, applied or kept
as its policy says, and given back to the supervisor's keeping.

Theory of operation
-------------------
A run planned `layered` (`plan.py`: `RunPlan.layer`, or `RunPlan.kept` to continue in a kept
layer) gets a `Layered` from its handle. `make()` makes the layer (a copy may take a while: in
a thread) before anything is spawned; a layer that cannot be made is the run's `spawn_failed`.
An overlay's directory goes to the child's plan (`overlay`), a copy's tree is its workspace.

When an activation answers, `settle()` turns the result the handle built into a layered one:
the change set computed by the parent from the layer (`changes.compute`, in a thread), the
artifacts the child claimed looked up in it (`in_change_set`) or in the unchanged base, the
files the user's own tools run found among the changes (`sensitiveChanges`), and the policy
applied: `on_success` applies a successful run's change set (`apply.py`), after which the
layer's base is moved to what was applied (so a continuable run's next change set holds only
what is new); `never` keeps it. A change set past its bounds fails the run
(`changes_too_large`) and discards the layer.

The supervisor keeps every layer that still holds something not applied (`keep_layer`), for
`Supervisor.apply` / `discard` and for runs that continue in it (`RunSpec.layer`); an applied
(or empty) layer is discarded when the run is over (`close`), a run that continued in a kept
layer leaves it to its keeper.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import anyio
import msgspec

from tether.parent.process.classify import Observed
from tether.parent.process.layers import Layer, LayerError, make
from tether.parent.run import apply, changes, evidence
from tether.parent.run.evidence import check_artifacts
from tether.protocol.messages import (
    ApplyOutcome,
    Artifact,
    ChangeSet,
    Failure,
    RunResult,
    SensitiveChange,
    SkippedPath,
)

if TYPE_CHECKING:
    from tether.parent.run.plan import RunPlan


class LayerKeeper(Protocol):
    def keep_layer(self, layer: Layer) -> None: ...

    def forget_layer(self, layer: Layer) -> None: ...


class Layered:
    """See the module docstring."""

    def __init__(self, keeper: LayerKeeper, plan: RunPlan) -> None:
        self._keeper = keeper
        self._plan = plan
        self.layer: Layer | None = plan.kept
        self._owned = plan.kept is None
        """This run made the layer (else it continues in one the supervisor keeps)."""
        self._pending = False
        """The latest change set holds something not applied."""

    @property
    def overlay(self) -> str | None:
        """The layer directory the child's plan mounts as an overlay, if it is one."""
        layer = self.layer
        return layer.root if layer is not None and layer.plan.overlay else None

    async def make(self, observed: Observed) -> bool:
        """Make the run's layer (a kept one is there already); `False`, with the spawn error
        recorded, when it cannot be made."""
        if self.layer is not None:
            return True
        planned = self._plan.layer
        assert planned is not None
        limits = self._plan.config.layer_limits
        try:
            self.layer = await anyio.to_thread.run_sync(lambda: make(planned, limits))
        except LayerError as exc:
            observed.spawn_error = f"the run's layered workspace could not be made: {exc}"
            return False
        self._keeper.keep_layer(self.layer)
        return True

    async def settle(
        self, result: RunResult, claimed: Sequence[Artifact], *, final: bool
    ) -> RunResult:
        """`result` as a layered run's (see the module docstring)."""
        layer = self.layer
        policy = self._plan.apply
        result = msgspec.structs.replace(result, workspace_mode="layered")
        if layer is None or layer.discarded:
            return result  # never made: the result says why
        limits = self._plan.config.layer_limits
        try:
            cs = await anyio.to_thread.run_sync(lambda: changes.compute(layer, limits))
        except (changes.ChangesTooLarge, OSError) as exc:
            too_large = isinstance(exc, changes.ChangesTooLarge)
            self._discard()
            why = (
                f"the change set is refused: {exc}"
                if too_large
                else (f"the layer could not be read by the parent: {exc}")
            )
            return msgspec.structs.replace(
                result,
                success=False,
                status="error",
                message=f"{why}; the layer was discarded",
                failure=Failure(kind="changes_too_large" if too_large else "agent_error"),
                artifacts=[],
                applied=ApplyOutcome(state="discarded", policy=policy, message=why),
            )
        artifacts, skipped = _artifacts(cs, layer, claimed, result)
        result = msgspec.structs.replace(
            result,
            changes=cs,
            artifacts=artifacts,
            skipped=skipped,
            sensitive_changes=sensitive_of(cs),
        )
        self._pending = bool(cs.changes)
        if policy == "on_success" and result.success and cs.changes:
            outcome = await anyio.to_thread.run_sync(lambda: apply.apply(cs, policy=policy))
            if outcome.state == "applied":
                self._pending = False
                layer.rebase(outcome.paths)
                result = evidence.as_applied(cs.workspace, result)
        elif not cs.changes:
            outcome = ApplyOutcome(state="applied", policy=policy, message="nothing changed")
        else:
            why = (
                "kept: apply it with Supervisor.apply(result) or `tether apply`"
                if policy == "never"
                else "kept: the run did not succeed"
            )
            outcome = ApplyOutcome(state="not_applied", policy=policy, message=why)
        if final and not self._pending and self._owned:
            self._discard()
        return msgspec.structs.replace(result, applied=outcome)

    def close(self) -> None:
        """The run is over: its layer is discarded when nothing of it waits to be applied."""
        if self._owned and not self._pending:
            self._discard()

    def _discard(self) -> None:
        layer = self.layer
        if layer is not None and not layer.discarded:
            layer.discard()
            self._keeper.forget_layer(layer)


def _artifacts(
    cs: ChangeSet, layer: Layer, claimed: Sequence[Artifact], result: RunResult
) -> tuple[list[Artifact], list[SkippedPath]]:
    """What the child claimed, looked up by the parent: in the change set (`in_change_set`,
    where it will be once applied), or in the unchanged base."""
    by_path = {c.path: c for c in cs.changes}
    seen_root = layer.plan.child_workspace
    kept: list[Artifact] = []
    skipped = [s for s in result.skipped if s.path not in {a.path for a in claimed}]
    base: list[Artifact] = []
    for artifact in claimed:
        rel = _relative(seen_root, artifact.path)
        if rel is None:
            skipped.append(
                SkippedPath(
                    path=artifact.path, reason="outside the workspace (checked by the parent)"
                )
            )
            continue
        change = by_path.get(rel)
        if change is not None and change.change != "deleted":
            kept.append(
                Artifact(
                    path=os.path.join(cs.workspace, rel),
                    size=change.size,
                    fs_type=change.fs_type,
                    in_change_set=True,
                )
            )
        elif change is not None:
            skipped.append(SkippedPath(path=artifact.path, reason="deleted in the layer"))
        else:
            base.append(msgspec.structs.replace(artifact, path=os.path.join(cs.workspace, rel)))
    found, lost = check_artifacts(cs.workspace, base, [])
    return [*kept, *found], [*skipped, *lost]


def _relative(root: str, path: str) -> str | None:
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(root, path))
    if full == root:
        return None
    if not full.startswith(root.rstrip("/") + "/") or ".." in path.split("/"):
        return None
    return full[len(root.rstrip("/")) + 1 :]


def sensitive_of(cs: ChangeSet) -> list[SensitiveChange]:
    """The changes to files the user's own tools run, with what they hold in the layer."""
    out: list[SensitiveChange] = []
    for c in cs.changes:
        if c.runs is None:
            continue
        kind = (
            "deleted"
            if c.change == "deleted"
            else "added"
            if c.change != "modified"
            else "modified"
        )
        content = ""
        if c.fs_type == "symlink":
            content = c.target or ""
        elif c.fs_type == "file" and c.change != "deleted":
            content = _head(cs, c.path)
        out.append(
            SensitiveChange(
                path=c.path,
                change=kind,  # type: ignore[arg-type]
                runs=c.runs,
                fs_type=None
                if c.change == "deleted"
                else "other"
                if c.fs_type == "directory"
                else c.fs_type,
                size=c.size,
                executable=bool((c.mode or 0) & 0o111) and c.fs_type == "file",
                content=content,
                truncated=c.size > CONTENT_BYTES,
            )
        )
    return out


CONTENT_BYTES = 4096


def _head(cs: ChangeSet, rel: str) -> str:
    root = apply.content_root(cs)
    parent, _, name = rel.rpartition("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in (p for p in parent.split("/") if p):
            nxt = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = nxt
        f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        try:
            data = os.read(f, CONTENT_BYTES)
        finally:
            os.close(f)
    except OSError:
        return ""
    finally:
        os.close(fd)
    if b"\0" in data:
        return "(binary)"
    return data.decode("utf-8", "replace")
