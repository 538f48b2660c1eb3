"""TaskOutput: a status that never calls a cut-off sub-agent completed, and the compact form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.delegation import TaskOutput, task_status
from tether.protocol.messages import FAILURE_KINDS, Artifact, Failure, RunResult, SkippedPath

EXPECTED = {
    "budget_exhausted": "truncated",
    "timeout": "truncated",
    "unresponsive": "truncated",
    "oom": "truncated",
    "cpu_limit": "truncated",
    "fsize_limit": "truncated",
    "tasks_limit": "truncated",
    "crashed": "crashed",
    "killed": "crashed",
    "exit_nonzero": "crashed",
    "protocol": "crashed",
    "oversize": "crashed",
    "cancelled": "aborted",
    "spawn_failed": "error",
    "agent_error": "error",
    "placement_lost": "error",
}


def test_every_failure_kind_has_a_status_and_none_is_completed() -> None:
    assert set(EXPECTED) == set(FAILURE_KINDS)
    for kind, status in EXPECTED.items():
        result = RunResult(success=False, status="error", failure=Failure(kind=kind))  # type: ignore[arg-type]
        assert task_status(result) == status, kind


def test_a_successful_run_is_completed() -> None:
    assert task_status(RunResult(success=True, status="completed")) == "completed"


results = st.builds(
    RunResult,
    success=st.booleans(),
    status=st.sampled_from(["completed", "aborted", "error"]),
    failure=st.none() | st.builds(Failure, kind=st.sampled_from(FAILURE_KINDS)),
)


@given(results)
def test_only_a_successful_completed_run_without_a_failure_is_completed(result: RunResult) -> None:
    completed = result.success and result.status == "completed" and result.failure is None
    assert (task_status(result) == "completed") == completed


def test_compact_keeps_summary_status_and_each_artifact_path_size_and_type() -> None:
    out = TaskOutput(
        summary="2 TODOs",
        artifacts=[
            Artifact(
                path="/ws/report.md", size=120, fs_type="file", modified_at="2026-01-01T00:00:00Z"
            ),
            Artifact(path="/ws/out", size=4096, fs_type="directory"),
        ],
        status="completed",
        steps=5,
        skipped=[SkippedPath(path="/etc/passwd", reason="outside the workspace")],
        changed_files=["report.md"],
    )
    assert out.compact() == {
        "summary": "2 TODOs",
        "status": "completed",
        "artifacts": [
            {"path": "/ws/report.md", "size": 120, "fsType": "file"},
            {"path": "/ws/out", "size": 4096, "fsType": "directory"},
        ],
    }


def test_the_full_form_leaves_out_what_is_empty() -> None:
    out = TaskOutput(summary="done", artifacts=[], status="completed", steps=2)
    assert out.to_dict() == {"summary": "done", "artifacts": [], "status": "completed", "steps": 2}
    assert out.ok


@pytest.mark.parametrize(
    "status", ["truncated", "crashed", "aborted", "error", "failed_verification"]
)
def test_only_completed_is_ok(status: str) -> None:
    assert not TaskOutput(summary="", artifacts=[], status=status, steps=0).ok  # type: ignore[arg-type]
