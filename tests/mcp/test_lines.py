"""What a client reads: progress lines for each sub-agent event, the bounded progress feed, and
a task call's answer (text, structured content, error or not)."""

from __future__ import annotations

import unicodedata

import anyio
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.delegation.output import (
    ArgumentProblem,
    TaskOutput,
    Verification,
    refused,
)
from tether.parent.mcp_server.progress import ProgressFeed, describe
from tether.parent.mcp_server.task import answer, output_schema
from tether.parent.run.status import TASK_STATUSES
from tether.parent.run.subagent_events import (
    SubagentCompleted,
    SubagentProgress,
    SubagentQueued,
    SubagentStarted,
)
from tether.protocol.messages import Artifact

WHO = dict(id="sa-2", type="explorer", label="look around")


def progress(kind: str, **data: object) -> SubagentProgress:
    return SubagentProgress(
        **WHO, kind=kind, data=dict(data), step=3, last_tool="grep", elapsed=1.25, tokens=1234
    )


def test_each_kind_of_event_reads_as_one_line_with_the_running_figures() -> None:
    figures = "(step 3, 1.2 s, last tool grep, 1234 tokens)"
    assert describe(progress("tool_call", name="read_file")) == (
        f"sa-2 explorer 'look around': calls read_file {figures}"
    )
    assert describe(progress("heartbeat")) == f"sa-2 explorer 'look around': working {figures}"
    assert describe(progress("step", iteration=3)) == (
        f"sa-2 explorer 'look around': next step {figures}"
    )
    assert describe(progress("something_new")).startswith(
        "sa-2 explorer 'look around': something_new ("
    )
    assert (
        describe(
            SubagentQueued(
                **WHO, tool_call_id="mcp-1", position=2, waiting_for="workspace", limit=1
            )
        )
        == "sa-2 explorer 'look around': queued (position 2, waiting for the workspace)"
    )
    assert (
        describe(SubagentStarted(**WHO, tool_call_id="mcp-1", role="verifier", read_only=True))
        == "sa-2 explorer 'look around': started (verifier, read-only)"
    )
    done = dict(**WHO, tool_call_id="mcp-1", role="task")
    assert (
        describe(SubagentCompleted(**done, success=True, status="completed", message="all good"))
        == "sa-2 explorer 'look around': completed"
    )
    assert (
        describe(
            SubagentCompleted(**done, success=False, status="truncated", message="wall limit 30s")
        )
        == "sa-2 explorer 'look around': truncated: wall limit 30s"
    )


@given(st.text(max_size=300), st.text(max_size=100))
def test_a_line_is_one_line_of_clean_text_whatever_the_label_and_tool(
    label: str, tool: str
) -> None:
    event = SubagentProgress(
        id="sa-1",
        type="x",
        label=label,
        kind="tool_call",
        data={"name": tool},
        step=1,
        last_tool=tool,
        elapsed=0.0,
        tokens=0,
    )
    line = describe(event)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    # No control character (tab aside) and no bidirectional override survives.
    assert not [c for c in line if unicodedata.category(c) == "Cc" and c != "\t"]
    assert not set(line) & set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    assert len(line) < 400


@pytest.mark.anyio
async def test_the_feed_keeps_the_newest_lines_and_ends_after_the_last_once_closed() -> None:
    feed = ProgressFeed(capacity=3)
    for n in range(5):
        feed.put(str(n))
    feed.close()
    feed.put("too late")
    with anyio.fail_after(5):
        got = [line async for line in feed]
    assert got == ["2", "3", "4"] and feed.dropped == 2


@pytest.mark.anyio
async def test_a_reader_waits_for_lines_and_wakes_for_each() -> None:
    feed = ProgressFeed()
    got: list[str] = []

    async def read() -> None:
        async for line in feed:
            got.append(line)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.sleep(0.05)
            feed.put("a")
            await anyio.sleep(0.05)
            assert got == ["a"]
            feed.put("b")
            feed.close()
    assert got == ["a", "b"]


def output(status: str, **more: object) -> TaskOutput:
    fields: dict[str, object] = {"summary": "did it", "artifacts": [], "steps": 2, **more}
    return TaskOutput(status=status, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("status", TASK_STATUSES)
def test_only_a_completed_or_asking_task_is_not_an_error_and_every_answer_fits_the_schema(
    status: str,
) -> None:
    got = answer(output(status, message="why", subagent_id="sa-1"))
    assert got.is_error == (status not in ("completed", "needs_input"))
    assert got.text.startswith(f"{status} (sa-1, 2 steps): did it")
    assert got.structured is not None
    jsonschema.validate(got.structured, output_schema())


def test_the_text_carries_artifacts_changes_verification_and_why() -> None:
    out = output(
        "failed_verification",
        message="the verifier still answered FAIL",
        subagent_id="sa-4",
        artifacts=[Artifact(path="/ws/a.py", size=12, fs_type="file", modified_at="t")],
        changed_files=["a.py", "b.py"],
        verification=Verification(verdict="FAIL", fix_cycles=2, findings="1. wrong"),
    )
    assert answer(out).text.splitlines() == [
        "failed_verification (sa-4, 2 steps): did it",
        "why: the verifier still answered FAIL",
        "artifact: /ws/a.py (file, 12 bytes)",
        "changed: a.py, b.py",
        "verification: FAIL after 2 fix cycle(s)",
    ]


def test_a_sub_agent_that_asks_shows_its_question() -> None:
    got = answer(output("needs_input", subagent_id="ag_1", question="Which file?"))
    assert not got.is_error
    assert got.text.splitlines() == ["needs_input (ag_1, 2 steps): did it", "question: Which file?"]


def test_a_refusal_reads_as_its_problems_once() -> None:
    out = refused(
        "invalid_arguments",
        "Invalid arguments: prompt: missing (required).",
        [ArgumentProblem(argument="prompt", problem="missing (required)")],
    )
    got = answer(out)
    assert got.is_error
    assert got.text == (
        "error: The task call was refused; nothing was run. Invalid arguments: prompt: missing "
        "(required)."
    )
    jsonschema.validate(got.structured, output_schema())


def test_child_words_in_the_text_are_cleaned_for_terminals() -> None:
    got = answer(output("completed", summary="ok \x1b[2J\x1b]0;pwned\x07done"))
    assert "\x1b" not in got.text and "\x07" not in got.text
