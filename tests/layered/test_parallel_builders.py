"""Build sub-agents in layered workspaces (issue 34, points 3 and 4): they run side by side
(the workspace's writers gate is for shared runs), what each changed comes back as a change
set the parent computed, the first applied wins and the second reports the conflict to the
orchestrator's model with both sides; the policies `never`, `on_success` and `on_verified`;
and attempts (point 5): each admitted under the concurrency cap and drawing on the tree's token
budget as a sub-agent of its own, the verifier choosing."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from book import ORCHESTRATOR, Recorder, call, complete, script, task, turn

from tether.parent import Supervisor
from tether.parent.delegation import VerifierPolicy
from tether.parent.run.events import Event
from tether.parent.run.subagent_events import SubagentCompleted, SubagentQueued, SubagentStarted

pytestmark = pytest.mark.anyio


def writer(mark: str, command: str, *, delay: float = 1.0) -> dict[str, Any]:
    return script(
        mark,
        turn(call("bash", command=command), delay=delay),
        turn(complete(f"{mark} done", "shared.txt")),
    )


def fan_out(*tasks: dict[str, Any]) -> dict[str, Any]:
    return script(ORCHESTRATOR, turn(*tasks, text="delegating"), turn(complete("all done")))


class Timeline:
    def __init__(self) -> None:
        self.events: list[tuple[float, Event]] = []

    def __call__(self, event: Event) -> None:
        self.events.append((time.monotonic(), event))

    def at(self, kind: type[Any], sid: str) -> float:
        return next(t for t, e in self.events if isinstance(e, kind) and e.id == sid)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shared.txt").write_text("base\n")
    return ws


async def test_two_build_sub_agents_editing_one_file_run_in_parallel_and_the_second_conflicts(
    workspace: Path,
) -> None:
    model = Recorder(
        fan_out(
            task("c1", "tester", "edit A", "MARK-A: write A into shared.txt"),
            task("c2", "tester", "edit B", "MARK-B: write B into shared.txt"),
        ),
        writer("MARK-A", "printf 'A\\n' > shared.txt && echo a > a.txt"),
        writer("MARK-B", "printf 'B\\n' > shared.txt && echo b > b.txt", delay=2.0),
    )
    seen = Timeline()
    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Edit.", model=model, workspace=workspace, on_event=seen, workspace_mode="layered"
        )
        assert sup.layers == {}  # every layer applied or discarded
    assert got.success
    # Side by side: both started before either finished (shared, the second would wait).
    ends = [seen.at(SubagentCompleted, s) for s in ("sa-1", "sa-2")]
    assert max(seen.at(SubagentStarted, s) for s in ("sa-1", "sa-2")) < min(ends)
    first, second = model.task_output("c1"), model.task_output("c2")
    assert first["status"] == "completed" and first["applied"]["state"] == "applied"
    assert first["workspaceMode"] == "layered"
    changed = {c["path"]: c for c in first["changes"]["changes"]}
    assert set(changed) == {"shared.txt", "a.txt"}
    assert "-base\n+A" in changed["shared.txt"]["diff"]
    assert second["status"] == "conflict"
    conflict = second["applied"]["conflicts"][0]
    assert conflict["path"] == "shared.txt"
    assert conflict["workspace"] == "A\n" and conflict["layer"] == "B\n"
    assert "conflict" in second["message"] or "first" in second["message"]
    # The first's change set is in the workspace, nothing of the second's.
    assert (workspace / "shared.txt").read_text() == "A\n"
    assert (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()


async def test_with_apply_never_the_change_set_comes_back_and_the_workspace_is_untouched(
    workspace: Path,
) -> None:
    model = Recorder(
        fan_out(task("c1", "tester", "edit A", "MARK-A: write A")),
        writer("MARK-A", "printf 'A\\n' > shared.txt", delay=0.0),
    )
    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Edit.", model=model, workspace=workspace, workspace_mode="layered", apply="never"
        )
        output = got.tasks[0].output
        assert output.applied is not None and output.applied.state == "not_applied"
        assert (workspace / "shared.txt").read_text() == "base\n"
        assert output.changes is not None
        # The orchestrator's caller applies it later.
        applied = await sup.apply(output.changes)
        assert applied.state == "applied"
        assert (workspace / "shared.txt").read_text() == "A\n"
        assert sup.layers == {}
    # The artifact points into the change set until it is applied.
    assert output.artifacts[0].in_change_set


async def test_an_applied_change_sets_artifact_reaches_the_model_as_delivered_in_the_workspace(
    workspace: Path,
) -> None:
    """Once its change set is applied, a sub-agent's artifact is the workspace's file, looked
    up by the parent: not in the change set any more, and not `skipped` as changed after the
    run answered (the applying is what changed it)."""
    model = Recorder(
        fan_out(task("c1", "tester", "edit A", "MARK-A: write A")),
        writer("MARK-A", "printf 'A\\n' > shared.txt", delay=0.0),
    )
    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Edit.", model=model, workspace=workspace, workspace_mode="layered"
        )
    output = model.task_output("c1")
    assert output["applied"]["state"] == "applied", output
    assert output.get("skipped") is None, output["skipped"]
    [artifact] = output["artifacts"]
    assert artifact["path"] == str(workspace / "shared.txt") and artifact["size"] == 2
    assert not artifact.get("inChangeSet") and artifact["modifiedAt"] is not None
    assert got.tasks[0].output.artifacts[0].in_change_set is False


def verifier(verdict: str) -> dict[str, Any]:
    return script(
        "Role: verifier",
        turn(call("read_file", path="shared.txt")),
        turn(complete(f"checked.\nVERDICT: {verdict}")),
    )


@pytest.mark.parametrize("verdict", ["PASS", "FAIL"])
async def test_on_verified_applies_only_after_the_verifiers_pass_and_the_verifier_reads_the_layer(
    workspace: Path, verdict: str
) -> None:
    model = Recorder(
        fan_out(task("c1", "tester", "edit A", "MARK-A: write A")),
        verifier(verdict),  # first: its prompt holds the task's words too
        writer("MARK-A", "printf 'A\\n' > shared.txt", delay=0.0),
    )
    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Edit.",
            model=model,
            workspace=workspace,
            workspace_mode="layered",
            apply="on_verified",
            verifier=VerifierPolicy(max_fix_cycles=0),
        )
        assert sup.layers == {}
    assert got.success
    output = model.task_output("c1")
    assert output["verification"]["verdict"] == verdict, output["verification"]
    # The verifier read the layer's shared.txt, not the workspace's.
    [run] = model.runs("Role: verifier")
    [read] = model.tool_results(run[-1]).values()
    assert read.endswith("\tA") and "base" not in read
    if verdict == "PASS":
        assert output["applied"]["state"] == "applied"
        assert (workspace / "shared.txt").read_text() == "A\n"
    else:
        assert output["status"] == "failed_verification"
        assert output["applied"]["state"] == "discarded"
        assert (workspace / "shared.txt").read_text() == "base\n"


async def test_three_attempts_at_one_fix_with_the_verifier_choosing_apply_the_passing_one(
    workspace: Path,
) -> None:
    """Three attempts at one fix in parallel, each in its own layer with its own verifier. The
    verifier's model here judges what it read in its layer (the parent hands it the tool's
    output), so only the attempt that wrote GOOD passes; that one is applied, the others are
    discarded, and the model reads which was taken and why."""
    from tether.parent import ModelCompleteParams, ModelCompleteResult
    from tether.protocol.messages import ChatMessage, ToolCall

    counter = {"fix": 0}

    class Judge:
        """Sub-agents write BAD, GOOD, BAD in the order they ask; the verifier reads
        shared.txt and passes only GOOD."""

        async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
            system = params.messages[0].content
            tools = [m for m in params.messages if m.role == "tool"]
            if "You are an orchestrator" in system:
                if not tools:
                    args = {
                        "subagent_type": "tester",
                        "description": "fix it",
                        "prompt": "make shared.txt right",
                        "attempts": 3,
                    }
                    return _call("c1", "task", args)
                return _call("done", "complete", {"summary": "all done"})
            if "Role: verifier" in system:
                if not tools:
                    return _call("r", "read_file", {"path": "shared.txt"})
                verdict = "PASS" if "GOOD" in tools[-1].content else "FAIL"
                return _call("v", "complete", {"summary": f"read it\nVERDICT: {verdict}"})
            if not tools:
                counter["fix"] += 1
                value = "GOOD" if counter["fix"] == 2 else "BAD"
                return _call("w", "bash", {"command": f"printf '{value}\\n' > shared.txt"})
            return _call("d", "complete", {"summary": "wrote it", "paths": ["shared.txt"]})

    def _call(call_id: str, name: str, args: dict[str, Any]) -> ModelCompleteResult:
        return ModelCompleteResult(
            message=ChatMessage(
                role="assistant", tool_calls=[ToolCall(id=call_id, name=name, arguments=args)]
            ),
            stop_reason="tool_use",
        )

    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Fix.",
            model=Judge(),
            workspace=workspace,
            workspace_mode="layered",
            apply="on_verified",
            verifier=VerifierPolicy(max_fix_cycles=0),
        )
        assert sup.layers == {}
    assert got.success
    [call_] = got.tasks
    output = call_.output
    assert output.status == "completed"
    assert output.taken is not None and "pass its verifier" in output.taken_because
    reports = {r.attempt: r for r in output.attempts}
    assert sorted(reports) == [1, 2, 3]
    assert [r.verdict for r in output.attempts].count("PASS") == 1
    assert reports[output.taken].verdict == "PASS"
    assert output.applied is not None and output.applied.state == "applied"
    assert (workspace / "shared.txt").read_text() == "GOOD\n"
    # Each attempt is a run of its own: admitted, recorded, verified (3 tasks, 3 verifiers).
    roles = sorted(r.role for r in got.ledger.records)
    assert roles == ["task"] * 3 + ["verifier"] * 3
    assert len({r.subagent_id for r in got.ledger.records if r.role == "task"}) == 3


async def test_each_attempt_is_admitted_as_a_sub_agent_of_its_own_and_past_the_cap_it_queues(
    workspace: Path,
) -> None:
    """Attempts are no way around admission: under a cap of one, three attempts of one task
    call run one after another, the waiting ones told as `subagent.queued`, and each is a run
    of the ledger with its own tokens in the tree's totals."""
    model = Recorder(
        fan_out(task("c1", "tester", "edit", "MARK-T: write T", attempts=3)),
        script(
            "MARK-T",
            turn(call("bash", command="printf 'T\\n' > shared.txt"), delay=0.3, tokens=100),
            turn(complete("T done", "shared.txt"), tokens=100),
        ),
    )
    seen = Timeline()
    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Edit.",
            model=model,
            workspace=workspace,
            workspace_mode="layered",
            max_concurrent=1,
            on_event=seen,
        )
        assert sup.layers == {}
    assert got.success
    output = got.tasks[0].output
    assert [r.status for r in output.attempts] == ["completed"] * 3
    assert output.taken is not None and (workspace / "shared.txt").read_text() == "T\n"
    sids = sorted({e.id for _, e in seen.events if isinstance(e, SubagentStarted)})
    assert len(sids) == 3
    queued = [e for _, e in seen.events if isinstance(e, SubagentQueued)]
    assert {e.waiting_for for e in queued} == {"slot"} and {e.limit for e in queued} == {1}
    assert len({e.id for e in queued}) == 2  # all but the first waited for its place
    # One at a time: each attempt started after the one before it ended.
    spans = sorted((seen.at(SubagentStarted, s), seen.at(SubagentCompleted, s)) for s in sids)
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
    tasks = [r for r in got.ledger.records if r.role == "task"]
    assert len(tasks) == 3 and {r.usage.input_tokens for r in tasks} == {200}
    totals = got.ledger.totals()
    assert totals.subagents.input_tokens == 600


async def test_the_trees_token_budget_counts_every_attempt(workspace: Path) -> None:
    """The tree's budget (250 tokens) holds the orchestrator's turn (11) and one attempt (2
    turns of 101); the second attempt's first turn spends it, so that attempt is ended and the
    third never starts: attempts draw on the one budget like any sub-agents."""
    model = Recorder(
        fan_out(task("c1", "tester", "edit", "MARK-T: write T", attempts=3)),
        script(
            "MARK-T",
            turn(call("bash", command="printf 'T\\n' > shared.txt"), delay=0.3, tokens=100),
            turn(complete("T done", "shared.txt"), tokens=100),
        ),
    )
    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Edit.",
            model=model,
            workspace=workspace,
            workspace_mode="layered",
            max_concurrent=1,
            token_budget=250,
        )
        assert sup.layers == {}
    assert got.result.failure is not None and got.result.failure.kind == "budget_exhausted"
    output = got.tasks[0].output
    statuses = sorted((r.status, r.summary) for r in output.attempts)
    assert statuses == [
        ("completed", "T done"),
        ("truncated", "the token budget of the whole delegation tree is spent"),
        (
            "truncated",
            "the token budget of the whole tree was spent before this sub-agent could start",
        ),
    ]
    # The one that finished is taken and applied; the ended one's layer is discarded.
    assert output.taken is not None and output.applied is not None
    assert output.applied.state == "applied" and (workspace / "shared.txt").read_text() == "T\n"
    # Two attempts ran (and are billed to the tree), the third never did.
    tasks = [r for r in got.ledger.records if r.role == "task"]
    assert sorted((r.usage.input_tokens, r.failure) for r in tasks) == [
        (100, "budget_exhausted"),
        (200, None),
    ]


async def test_a_verifiers_fail_drives_the_fix_in_the_same_layer_and_the_whole_change_is_applied(
    workspace: Path,
) -> None:
    """The first verifier fails the change; the fix runs in the same layer (it sees the
    author's change, not the workspace's), the second verifier passes, and the change set
    applied is the author's and the fix's together."""
    model = Recorder(
        fan_out(task("c1", "tester", "edit A", "MARK-A: write A and a note")),
        script(
            "Role: verifier(?s:.*)FIXED-NOTE",
            turn(call("read_file", path="note.txt")),
            turn(complete("the note is there now\nVERDICT: PASS")),
        ),
        script(
            "Role: verifier",
            turn(call("read_file", path="shared.txt")),
            turn(complete("no note.txt\nVERDICT: FAIL")),
        ),
        script(
            "Fix cycle(?s:.*)MARK-A",
            turn(call("bash", command="cat shared.txt > note.txt")),
            turn(complete("FIXED-NOTE: note.txt holds what shared.txt does", "note.txt")),
        ),
        writer("MARK-A", "printf 'A\\n' > shared.txt", delay=0.0),
    )
    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Edit.",
            model=model,
            workspace=workspace,
            workspace_mode="layered",
            apply="on_verified",
        )
        assert sup.layers == {}
    assert got.success
    output = model.task_output("c1")
    assert output["verification"]["verdict"] == "PASS", output["verification"]
    assert output["verification"]["fixCycles"] == 1
    assert output["applied"]["state"] == "applied"
    # The fix read the author's shared.txt in the layer: "A", not the workspace's "base".
    assert (workspace / "note.txt").read_text() == "A\n"
    assert (workspace / "shared.txt").read_text() == "A\n"
    assert {c["path"] for c in output["changes"]["changes"]} == {"shared.txt", "note.txt"}
