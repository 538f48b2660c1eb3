"""A run's result is always owed: whatever raises in the parent while it builds an activation's
result (a bug, an `OSError` from the workspace) ends the activation as `parent_error`, logged
with its traceback, with the run's child taken down all the same — never a caller that waits
forever."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import anyio
import pytest

from tether.parent import Continuation
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.limits import Limits
from tether.parent.run import handle as handle_module
from tether.parent.run.events import Event, RunFinished, RunStarted
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio

COMPLETE = """{"turns": [
  {"text": "Done.", "toolCalls": [{"name": "complete",
    "arguments": {"summary": "wrote it", "paths": ["notes.txt"]}}]}
]}"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("TODO: everything\n")
    return tmp_path


def _started_pid(events: list[Event]) -> int:
    [started] = [e for e in events if isinstance(e, RunStarted)]
    assert started.pid > 0
    return started.pid


def _assert_parent_error(result: RunResult, what: str) -> None:
    assert not result.success
    assert result.status == "error"
    assert result.failure is not None and result.failure.kind == "parent_error"
    assert result.message.startswith(f"tether itself failed building this result: {what}"), (
        result.message
    )


async def test_a_result_that_raises_while_it_is_built_is_a_parent_error_not_a_hang(
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    thread_runs: Callable[[int], bool],
) -> None:
    def broken(*args: Any, **kwargs: Any) -> NoReturn:
        raise ValueError("embedded null byte")

    monkeypatch.setattr(handle_module, "build_result", broken)
    events: list[Event] = []
    with caplog.at_level(logging.ERROR, logger="tether.parent"):
        async with Supervisor() as sup:
            with anyio.fail_after(30):
                result = await sup.run(
                    "write the notes",
                    workspace=workspace,
                    model=ScriptedModel.from_json(COMPLETE),
                    limits=Limits(wall="20s"),
                    on_event=events.append,
                )
            pid = _started_pid(events)
            assert not thread_runs(pid)
    _assert_parent_error(result, "ValueError: embedded null byte")
    assert result.run_id
    assert result.usage.output_tokens > 0  # what the broker counted is still told
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert [e.result for e in finished] == [result]
    [logged] = [r for r in caplog.records if r.exc_info is not None]
    assert logged.exc_info is not None and logged.exc_info[0] is ValueError


async def test_a_sensitive_files_comparison_that_fails_ends_a_continuable_run_and_its_child(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, thread_runs: Callable[[int], bool]
) -> None:
    """Between a continuable run's activations the child is kept for a follow-up; one whose
    result tether could not build is not: it goes down the ladder, and a follow-up is told to
    start afresh (`None`)."""

    def unreadable(*args: Any, **kwargs: Any) -> NoReturn:
        raise PermissionError(13, "Permission denied", str(workspace))

    monkeypatch.setattr(handle_module, "changes", unreadable)
    events: list[Event] = []
    async with Supervisor() as sup:
        handle = await sup.start(
            "write the notes",
            workspace=workspace,
            model=ScriptedModel.from_json(COMPLETE),
            limits=Limits(wall="20s"),
            continuation=Continuation(60),
            on_event=events.append,
        )
        with anyio.fail_after(30):
            result = await handle.result()
            await handle.wait()
        assert await handle.message("again") is None
        pid = _started_pid(events)
        assert not thread_runs(pid)
    _assert_parent_error(result, "PermissionError: [Errno 13] Permission denied")


async def test_a_run_whose_own_machinery_raises_still_owes_its_caller_a_result(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only the build: what raises while the parent drives the run (here, before the child
    is obtained) ends it as `parent_error`, and the supervisor goes on serving other runs."""

    def broken(*args: Any, **kwargs: Any) -> NoReturn:
        raise OSError(5, "Input/output error")

    async with Supervisor() as sup:
        monkeypatch.setattr(handle_module, "take", broken)
        with anyio.fail_after(30):
            failed = await sup.run(
                "write the notes", workspace=workspace, model=ScriptedModel.from_json(COMPLETE)
            )
        monkeypatch.undo()
        with anyio.fail_after(30):
            fine = await sup.run(
                "write the notes", workspace=workspace, model=ScriptedModel.from_json(COMPLETE)
            )
    _assert_parent_error(failed, "OSError: [Errno 5] Input/output error")
    assert fine.success, fine


async def test_a_follow_up_whose_machinery_raises_is_a_parent_error_and_ends_the_run(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, thread_runs: Callable[[int], bool]
) -> None:
    """A follow-up is driven in its caller's task: what raises there (here, measuring the
    workspace before the follow-up) is the follow-up's `parent_error` result, not an exception
    in the caller, and the child it was to continue goes down the ladder."""
    two_turns = """{"turns": [
      {"text": "Done.", "toolCalls": [{"name": "complete", "arguments": {"summary": "one"}}]},
      {"text": "Done.", "toolCalls": [{"name": "complete", "arguments": {"summary": "two"}}]}
    ]}"""
    events: list[Event] = []
    async with Supervisor() as sup:
        handle = await sup.start(
            "write the notes",
            workspace=workspace,
            model=ScriptedModel.from_json(two_turns),
            limits=Limits(wall="20s"),
            continuation=Continuation(60),
            on_event=events.append,
        )
        with anyio.fail_after(30):
            first = await handle.result()
        assert first.success, first

        def broken(*args: Any, **kwargs: Any) -> NoReturn:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(handle_module, "take", broken)
        with anyio.fail_after(30):
            follow_up = await handle.message("and again")
            await handle.wait()
        assert follow_up is not None
        _assert_parent_error(follow_up, "OSError: [Errno 5] Input/output error")
        assert await handle.message("once more") is None
        pid = _started_pid(events)
        assert not thread_runs(pid)
