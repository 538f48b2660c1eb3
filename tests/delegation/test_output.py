"""TaskOutput: a status that never calls a cut-off sub-agent completed, and the compact form."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.delegation import TaskOutput, task_status
from tether.parent.delegation.output import COMPACT_SUMMARY_CHARS, refused
from tether.protocol.messages import FAILURE_KINDS, Artifact, Failure, RunResult, SkippedPath

EXPECTED = {
    "budget_exhausted": "truncated",
    "timeout": "truncated",
    "unresponsive": "truncated",
    "oom": "truncated",
    "cpu_limit": "truncated",
    "fsize_limit": "truncated",
    "tasks_limit": "truncated",
    "net_limit": "truncated",
    "crashed": "crashed",
    "killed": "crashed",
    "exit_nonzero": "crashed",
    "protocol": "crashed",
    "oversize": "crashed",
    "cancelled": "aborted",
    "spawn_failed": "error",
    "agent_error": "error",
    "placement_lost": "error",
    "changes_too_large": "error",
    "parent_error": "error",
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


def test_compact_keeps_the_sub_agent_id_and_its_question_so_it_can_still_be_continued() -> None:
    out = TaskOutput(
        summary="Which file?",
        artifacts=[],
        status="needs_input",
        steps=1,
        subagent_id="ag_0123",
        question="Which file?",
    )
    assert out.compact() == {
        "summary": "Which file?",
        "status": "needs_input",
        "artifacts": [],
        "subagentId": "ag_0123",
        "question": "Which file?",
    }


def test_a_compact_summary_is_cut_to_its_cap_and_says_so() -> None:
    out = TaskOutput(summary="x" * 50_000, artifacts=[], status="completed", steps=1)
    summary = out.compact()["summary"]
    assert len(summary) == COMPACT_SUMMARY_CHARS and summary.endswith("…")
    assert out.to_dict()["summary"] == "x" * 50_000  # the full form is untouched


def test_a_task_result_carries_its_compact_form_for_the_child_to_keep() -> None:
    out = TaskOutput(
        summary="wrote it",
        artifacts=[Artifact(path="/ws/A.md", size=3, fs_type="file", modified_at="2026")],
        status="completed",
        steps=2,
        changed_files=["A.md"],
        subagent_id="sa-1",
    )
    result = out.tool_result({"agentId": "sa-1"})
    assert not result.is_error
    assert json.loads(result.content) == {"agentId": "sa-1", **out.to_dict()}
    assert result.compact is not None
    assert list(json.loads(result.compact)) == [
        "agentId",
        "summary",
        "status",
        "artifacts",
        "subagentId",
    ]
    assert json.loads(result.compact) == {"agentId": "sa-1", **out.compact()}


def test_a_refused_call_delivered_nothing_and_carries_no_compact_form() -> None:
    result = refused("invalid_arguments", "Invalid arguments: prompt: missing.").tool_result()
    assert result.is_error and result.compact is None
    assert json.loads(result.content)["error"] == "invalid_arguments"


def test_the_full_form_leaves_out_what_is_empty() -> None:
    out = TaskOutput(summary="done", artifacts=[], status="completed", steps=2)
    assert out.to_dict() == {"summary": "done", "artifacts": [], "status": "completed", "steps": 2}
    assert out.ok


@pytest.mark.parametrize(
    "status", ["truncated", "crashed", "aborted", "error", "failed_verification"]
)
def test_only_completed_is_ok(status: str) -> None:
    assert not TaskOutput(summary="", artifacts=[], status=status, steps=0).ok  # type: ignore[arg-type]
