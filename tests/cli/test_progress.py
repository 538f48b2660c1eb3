"""`tether run`'s progress lines, one per event worth a person's attention (pure)."""

from __future__ import annotations

from tether.parent.cli.progress import describe
from tether.parent.run.events import ChildEvent, RunFinished, RunStarted, StoreTrouble
from tether.protocol.messages import Failure, RunResult


def ev(kind: str, **data: object) -> ChildEvent:
    return ChildEvent("r", 0, kind, dict(data))


def test_the_start_names_the_pid_and_a_launcher_other_than_local() -> None:
    local = describe(RunStarted("r", 42, ("python", "-m", "x")))
    assert local == "tether: child pid 42 started (python -m x)"
    boxed = describe(RunStarted("r", 42, ("python",), "bwrap"))
    assert boxed is not None and "started under bwrap" in boxed


def test_the_end_gives_the_kind_and_the_duration() -> None:
    ok = RunResult(success=True, status="completed", duration_seconds=1.234)
    assert describe(RunFinished("r", ok)) == "tether: run r ok in 1.23s"
    bad = RunResult(success=False, status="error", failure=Failure(kind="timeout"))
    assert describe(RunFinished("r", bad)) == "tether: run r failed (timeout)"


def test_a_refused_tool_call_says_so_with_its_reason() -> None:
    line = describe(ev("tool_result", name="write_file", isError=True, content="denied: read-only"))
    assert line == "  ! write_file refused or failed: denied: read-only"
    assert (
        describe(ev("tool_result", name="grep", isError=False, content="a\nb")) == "  = grep: a b"
    )
    assert describe(ev("tool_result", name="bash", isError=False, content="")) == "  = bash: done"


def test_a_heartbeat_says_what_is_pending_and_for_how_long() -> None:
    line = describe(ev("heartbeat", waitingFor="tool:bash", elapsedSeconds=4.0))
    assert line == "  … still waiting on tool:bash for 4s"
    assert describe(ev("heartbeat")) == "  … still waiting on something"


def test_a_childs_words_are_cleaned_and_cut_to_one_line() -> None:
    line = describe(ev("tool_result", name="x\x1b[2J", isError=True, content="y" * 500))
    assert line is not None and "\x1b" not in line and len(line) < 200
    said = describe(ev("text", text="two\nlines\x07"))
    assert said == "  says: two lines"


def test_events_nobody_needs_to_read_are_not_shown() -> None:
    assert describe(ev("started")) is None
    assert describe(ev("text", text="")) is None


def test_trouble_with_the_session_store_is_one_line_naming_the_agent() -> None:
    event = StoreTrouble("ag_" + "1" * 20, "its lease could not be released (it goes stale): x")
    assert describe(event) == (
        f"tether: agent {'ag_' + '1' * 20}: the session store: its lease could not be "
        "released (it goes stale): x"
    )
