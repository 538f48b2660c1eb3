"""Runner doubles for the delegator: they behave like real runs (succeed, fail with a failure
kind, take time, change the workspace, report progress and usage, get cancelled), because the
runner is the delegator's injected boundary. What only a real child can show is left to the
end-to-end tests of phase 2."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from tether.parent.delegation import RunRequest
from tether.protocol.messages import Artifact, Failure, FailureKind, RunResult, Usage

Behave = Callable[[RunRequest], Awaitable[RunResult]]


@dataclass
class Recorder:
    """A runner that records every request, when it ran and how many ran at once."""

    behave: Behave
    requests: list[RunRequest] = field(default_factory=list)
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    active: int = 0
    peak: int = 0

    async def __call__(self, request: RunRequest) -> RunResult:
        self.requests.append(request)
        self.active += 1
        self.peak = max(self.peak, self.active)
        started = time.monotonic()
        try:
            return await self.behave(request)
        finally:
            self.active -= 1
            self.spans.append((request.subagent_id, started, time.monotonic()))

    @property
    def roles(self) -> list[str]:
        return [r.role for r in self.requests]


def ok(
    summary: str = "done",
    *,
    steps: int = 3,
    usage: Usage | None = None,
    artifacts: list[Artifact] | None = None,
    run_id: str = "run-x",
) -> RunResult:
    return RunResult(
        success=True,
        status="completed",
        summary=summary,
        message="the agent called complete",
        iteration_count=steps,
        turn_count=1,
        usage=usage or Usage(input_tokens=100, output_tokens=20),
        artifacts=artifacts or [],
        run_id=run_id,
    )


def failed(kind: FailureKind, *, steps: int = 2, summary: str = "partial notes") -> RunResult:
    return RunResult(
        success=False,
        status="aborted" if kind == "cancelled" else "error",
        summary=summary,
        message=f"ended by {kind}",
        iteration_count=steps,
        usage=Usage(input_tokens=50, output_tokens=5),
        failure=Failure(kind=kind),
    )


def returns(result: RunResult, *, delay: float = 0.0) -> Behave:
    async def behave(request: RunRequest) -> RunResult:
        if delay:
            await anyio.sleep(delay)
        return result

    return behave


def writes(workspace: Path, files: dict[str, str], result: RunResult | None = None) -> Behave:
    """A build sub-agent that really writes files into the workspace."""

    async def behave(request: RunRequest) -> RunResult:
        assert not request.read_only, "a read-only run must not write"
        for rel, text in files.items():
            path = workspace / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return result or ok(f"wrote {len(files)} files", artifacts=[])

    return behave


async def hangs(request: RunRequest) -> RunResult:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")
