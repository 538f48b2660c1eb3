"""What a traced run leaves behind: a header, every brokered model call exactly as the model
saw it and answered it, the child's tool reports marked as its own, approvals and the result;
in a 0600 file, outside the workspace, bounded — and a run that goes on when its trace cannot."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.run.budget import Budget
from tether.parent.run.events import ChildEvent, Event
from tether.parent.run.spec import NamedModel
from tether.parent.supervisor import Supervisor
from tether.parent.trace import TraceSpec
from tether.parent.trace.format import Approval, ChildReport, Header, Outcome, Stopped, Turn, decode
from tether.parent.trace.reader import read_trace
from tether.protocol.messages import (
    PROTOCOL_VERSION,
    AgentDefinition,
    ModelCompleteParams,
    ModelCompleteResult,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
EXPLORER = ROOT / "examples" / "explorer.json"


class Seen:
    """A scripted model that keeps every request and answer it gave."""

    def __init__(self, script: Any) -> None:
        self.model = ScriptedModel.from_json(json.dumps(script))
        self.calls: list[tuple[ModelCompleteParams, ModelCompleteResult]] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        result = await self.model.complete(params)
        self.calls.append((params, result))
        return result


def lines(path: str) -> list[Any]:
    return [decode(raw) for raw in Path(path).read_bytes().splitlines()]


async def test_a_traced_run_records_every_model_call_as_the_model_saw_and_answered_it(
    workspace: Path, traces: Path, tmp_path: Path
) -> None:
    (workspace / "big.txt").write_text("word " * 400)
    read = {"name": "read_file", "arguments": {"path": "big.txt"}}
    write = {"name": "write_file", "arguments": {"path": "out.txt", "content": "hi\n"}}
    done = {"name": "complete", "arguments": {"summary": "read and wrote", "paths": ["out.txt"]}}
    model = Seen(
        {"turns": [{"toolCalls": [read]}, {"toolCalls": [read, write]}, {"toolCalls": [done]}]}
    )
    cheap = tmp_path / "cheap.json"
    cheap.write_text("[]")
    definition = AgentDefinition(
        type="worker", compaction_threshold=300, compaction_model=f"scripted:{cheap}"
    )
    events: list[Event] = []
    with anyio.fail_after(60):
        async with Supervisor(trace=traces) as sup:
            result = await sup.run(
                "Read big.txt, then write out.txt.",
                agent=definition,
                workspace=workspace,
                model=NamedModel("scripted:seen", model),
                on_event=events.append,
            )
    assert result.success, result
    assert result.trace is not None and result.trace.stopped is None
    path = result.trace.path
    assert Path(path).parent == traces and Path(path).name == f"{result.run_id}.jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(traces).st_mode) == 0o700
    written = lines(path)

    header = written[0]
    assert isinstance(header, Header)
    assert (header.run_id, header.agent, header.prompt) == (
        result.run_id,
        "worker",
        "Read big.txt, then write out.txt.",
    )
    assert header.definition.compaction_threshold == 300
    assert header.workspace == str(workspace)
    assert (header.model, header.compaction_model) == ("scripted:seen", f"scripted:{cheap}")
    assert header.protocol_version == PROTOCOL_VERSION and header.tether_version
    assert header.parent_run_id is None and header.provider == "spawn"

    turns = [ln for ln in written if isinstance(ln, Turn)]
    assert [t.index for t in turns] == list(range(1, len(turns) + 1))
    main = [t for t in turns if t.purpose == "turn"]
    # Exactly what the model was asked, and exactly what it answered.
    assert [(t.request.messages, t.request.tools) for t in main] == [
        (p.messages, p.tools) for p, _ in model.calls
    ]
    assert [t.response for t in main] == [r for _, r in model.calls]
    assert all((t.slot, t.model) == ("main", "scripted:seen") for t in main)
    [compaction] = [t for t in turns if t.purpose == "compaction"]
    assert (compaction.slot, compaction.model) == ("compaction", f"scripted:{cheap}")
    assert compaction.response is not None
    assert compaction.response.message.content == "(summary of earlier turns)"
    walls = [t.wall for t in turns]
    monos = [t.mono for t in turns]
    assert walls == sorted(walls) and monos == sorted(monos) and header.mono <= monos[0]
    assert all(t.seconds >= 0 for t in turns)

    # The child's reports of its tools, as the supervisor relayed them, marked as the child's.
    reports = [ln for ln in written if isinstance(ln, ChildReport)]
    relayed = [
        (e.kind, e.seq, e.data)
        for e in events
        if isinstance(e, ChildEvent) and e.kind in ("tool_call", "tool_result")
    ]
    assert [(r.event, r.seq, r.data) for r in reports] == relayed
    assert {r.source for r in reports} == {"child"}
    assert [r.data["name"] for r in reports if r.event == "tool_call"] == [
        "read_file",
        "read_file",
        "write_file",
        "complete",
    ]
    [approval] = [ln for ln in written if isinstance(ln, Approval)]
    assert (approval.tool, approval.allow) == ("write_file", True)
    assert approval.arguments == write["arguments"]

    outcome = written[-1]
    assert isinstance(outcome, Outcome)
    assert msgspec.structs.replace(result, trace=None) == msgspec.structs.replace(
        outcome.result, trace=None
    )
    assert outcome.result.trace is not None and outcome.result.trace.path == path


async def test_a_failed_model_call_and_one_the_parent_refused_are_traced_saying_who(
    workspace: Path, traces: Path
) -> None:
    listing = {"toolCalls": [{"name": "list_dir", "arguments": {"path": "."}}]}
    async with Supervisor(trace=traces) as sup:
        failed = await sup.run(
            "x",
            agent="explorer",
            workspace=workspace,
            model=ScriptedModel.from_json(json.dumps([listing, {"error": "the API is down"}])),
        )
        refused = await sup.run(
            "x",
            agent="explorer",
            workspace=workspace,
            model=ScriptedModel.from_json(json.dumps([listing, listing])),
            budgets=[Budget(5, label="the tree's token budget")],
        )
    assert not failed.success and not refused.success
    assert refused.failure is not None and refused.failure.kind == "budget_exhausted"
    assert failed.trace is not None and refused.trace is not None
    [_, by_model] = [ln for ln in lines(failed.trace.path) if isinstance(ln, Turn)]
    assert by_model.response is None and by_model.error is not None
    assert (by_model.error.by, by_model.error.message) == ("model", "the API is down")
    assert by_model.slot == "main"
    *answered, by_parent = [ln for ln in lines(refused.trace.path) if isinstance(ln, Turn)]
    assert all(t.response is not None for t in answered)
    assert by_parent.response is None and by_parent.error is not None
    assert by_parent.error.by == "parent" and by_parent.slot is None
    assert "the tree's token budget" in by_parent.error.message


async def test_a_trace_that_reaches_its_size_limit_stops_while_the_run_goes_on_and_says_so(
    workspace: Path, traces: Path
) -> None:
    async with Supervisor() as sup:
        result = await sup.run(
            "Report the TODO notes.",
            agent="explorer",
            workspace=workspace,
            model=f"scripted:{EXPLORER}",
            trace=TraceSpec(traces, max_bytes=12_000),
        )
    assert result.success, result
    assert result.trace is not None
    assert result.trace.stopped == "the trace reached its size limit of 12000 bytes"
    data = Path(result.trace.path).read_bytes()
    assert len(data) <= 12_000
    written = lines(result.trace.path)
    stopped = written[-1]
    assert isinstance(stopped, Stopped) and stopped.reason == result.trace.stopped
    assert stopped.bytes == len(data) - len(data.splitlines(keepends=True)[-1])
    assert sum(isinstance(ln, Turn) for ln in written) < 5  # the later calls were not written


async def test_a_trace_that_cannot_be_created_stops_and_the_run_still_succeeds(
    workspace: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    async with Supervisor(trace=blocker / "traces") as sup:
        result = await sup.run(
            "Report the TODO notes.",
            agent="explorer",
            workspace=workspace,
            model=f"scripted:{EXPLORER}",
        )
    assert result.success, result
    assert result.trace is not None and result.trace.stopped is not None
    assert result.trace.stopped.startswith("the trace could not be opened: Not a directory")


@pytest.mark.parametrize("where", ["inside", "symlink", "workspace"])
async def test_a_trace_directory_the_child_could_reach_is_refused_before_anything_runs(
    workspace: Path, tmp_path: Path, where: str
) -> None:
    target = {
        "inside": workspace / "traces",
        "symlink": tmp_path / "link",
        "workspace": workspace,
    }[where]
    if where == "symlink":
        target.symlink_to(workspace / "sub", target_is_directory=True)
    async with Supervisor(trace=target) as sup:
        with pytest.raises(ValueError, match="lies in the run's workspace"):
            await sup.start(
                "x", agent="explorer", workspace=workspace, model=f"scripted:{EXPLORER}"
            )
    assert not (workspace / "traces").exists()


async def test_a_trace_path_that_is_a_file_is_refused_before_anything_runs(
    workspace: Path, tmp_path: Path
) -> None:
    file = tmp_path / "plain"
    file.write_text("")
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match="is not a directory"):
            await sup.start("x", workspace=workspace, model=f"scripted:{EXPLORER}", trace=file)


async def test_a_symlink_planted_at_a_trace_name_is_never_followed(
    workspace: Path, traces: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    traces.mkdir()
    (traces / "run-planted.jsonl").symlink_to(victim)
    async with Supervisor(trace=traces) as sup:
        result = await sup.run(
            "Report the TODO notes.",
            agent="explorer",
            workspace=workspace,
            model=f"scripted:{EXPLORER}",
            run_id="run-planted",
        )
    assert result.success and result.trace is not None
    assert result.trace.path == str(traces / "run-planted~1.jsonl")
    assert victim.read_text() == "keep me\n"
    assert read_trace(result.trace.path).runs[0].run_id == "run-planted"
