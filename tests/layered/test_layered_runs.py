"""Layered runs end to end, with real children (issue 34, points 1, 2, 5, 6 and 7): the child
sees the workspace and writes only its layer (an overlay as root; a plain copy where forced),
the result names the mode and carries the parent's change set, `never` keeps the layer for
`Supervisor.apply`, a kept layer takes a second run, a change set past its bounds fails the run
and its layer goes, N attempts run at once and one is taken, and a hostile child's every escape
from its layer (links, hard links, `..`, renames across the layer, device nodes, the overlay's
own xattrs and mount) leaves the workspace's real files as they were."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from book import Recorder, call, complete, script, turn

from tether.parent import ChildConfig, Supervisor
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import layers
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio
HERE = Path(__file__).parent


def bash_model(command: str, *paths: str) -> ScriptedModel:
    turns = {
        "turns": [
            turn(call("bash", command=command)),
            turn(complete("done", *paths)),
        ]
    }
    return ScriptedModel.from_json(json.dumps(turns))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "canary.txt").write_text("the base\n")
    (ws / "dir").mkdir()
    (ws / "dir" / "inner.txt").write_text("inner\n")
    return ws


def snapshot(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_mode, p.read_bytes() if p.is_file() else None)
    return out


@pytest.fixture
def forced_copy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(layers.FORCE_ENV, "copy")
    yield


needs_overlay = pytest.mark.skipif(
    layers.support().overlay is None, reason=f"no overlay here: {layers.support().why_not}"
)


async def _run(workspace: Path, model: ScriptedModel, **more: Any) -> tuple[RunResult, Supervisor]:
    sup = Supervisor()
    async with sup:
        result = await sup.run("x", agent="tester", workspace=workspace, model=model, **more)
    return result, sup


@pytest.mark.parametrize("method", ["overlay", "copy"])
async def test_a_layered_child_changes_only_its_layer_and_the_parent_returns_the_change_set(
    workspace: Path, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if method == "copy":
        monkeypatch.setenv(layers.FORCE_ENV, "copy")
    elif layers.support().overlay is None:
        pytest.skip(f"no overlay here: {layers.support().why_not}")
    before = snapshot(workspace)
    command = "echo more >> canary.txt && mkdir -p new && echo n > new/n.txt && rm dir/inner.txt"
    async with Supervisor() as sup:
        result = await sup.run(
            "x",
            agent="tester",
            workspace=workspace,
            model=bash_model(command, "new/n.txt", "canary.txt"),
            workspace_mode="layered",
        )
        assert snapshot(workspace) == before  # the workspace itself: untouched
        assert result.success and result.workspace_mode == "layered"
        cs = result.changes
        assert cs is not None
        assert cs.method == (layers.support().overlay if method == "overlay" else "copy")
        got = {c.path: c.change for c in cs.changes}
        assert got == {
            "canary.txt": "modified",
            "new": "added",
            "new/n.txt": "added",
            "dir/inner.txt": "deleted",
        }
        assert {a.path: a.in_change_set for a in result.artifacts} == {
            str(workspace / "new/n.txt"): True,
            str(workspace / "canary.txt"): True,
        }
        assert result.applied is not None and result.applied.state == "not_applied"
        assert cs.layer in sup.layers and os.path.isdir(cs.layer)
        outcome = await sup.apply(result)
        assert outcome.state == "applied"
        assert (workspace / "canary.txt").read_text() == "the base\nmore\n"
        assert not (workspace / "dir" / "inner.txt").exists()
        assert not os.path.exists(cs.layer) and sup.layers == {}


async def test_a_shared_run_says_so_and_has_no_change_set(workspace: Path) -> None:
    async with Supervisor() as sup:
        result = await sup.run(
            "x", agent="tester", workspace=workspace, model=bash_model("echo s > s.txt")
        )
    assert result.workspace_mode == "shared" and result.changes is None
    assert (workspace / "s.txt").exists()


async def test_on_success_applies_at_once_and_leaves_no_layer(workspace: Path) -> None:
    async with Supervisor() as sup:
        result = await sup.run(
            "x",
            agent="tester",
            workspace=workspace,
            model=bash_model("echo s > s.txt", "s.txt"),
            workspace_mode="layered",
            apply="on_success",
        )
        assert sup.layers == {}
    assert result.applied is not None and result.applied.state == "applied"
    assert (workspace / "s.txt").read_text() == "s\n"
    [artifact] = result.artifacts
    assert not artifact.in_change_set and artifact.modified_at is not None


async def test_a_second_run_in_a_kept_layer_sees_and_adds_to_the_first_runs_changes(
    workspace: Path,
) -> None:
    async with Supervisor() as sup:
        first = await sup.run(
            "x",
            agent="tester",
            workspace=workspace,
            model=bash_model("echo one > one.txt"),
            workspace_mode="layered",
        )
        assert first.changes is not None
        second = await sup.run(
            "x",
            agent="tester",
            workspace=workspace,
            model=bash_model("cat one.txt > two.txt"),
            layer=first.changes.layer,
        )
        assert second.changes is not None and second.changes.layer == first.changes.layer
        assert {c.path for c in second.changes.changes} == {"one.txt", "two.txt"}
        assert not (workspace / "one.txt").exists()
        assert (await sup.apply(second)).state == "applied"
    assert (workspace / "two.txt").read_text() == "one\n"


async def test_a_change_set_past_its_bounds_fails_the_run_and_discards_the_layer(
    workspace: Path,
) -> None:
    config = ChildConfig(layer_limits=layers.LayerLimits(max_change_files=2))
    async with Supervisor(config) as sup:
        result = await sup.run(
            "x",
            agent="tester",
            workspace=workspace,
            model=bash_model("for i in 1 2 3 4; do echo $i > f$i; done"),
            workspace_mode="layered",
        )
        assert sup.layers == {}
    assert not result.success and result.failure is not None
    assert result.failure.kind == "changes_too_large"
    assert result.applied is not None and result.applied.state == "discarded"
    assert result.changes is None
    assert sorted(p.name for p in workspace.iterdir()) == ["canary.txt", "dir"]


async def test_three_attempts_run_in_their_own_layers_and_the_one_chosen_is_applied(
    workspace: Path,
) -> None:
    seen: list[Sequence[RunResult]] = []

    def choose(results: Sequence[RunResult]) -> int:
        seen.append(results)
        return 2

    async with Supervisor() as sup:
        result = await sup.run(
            "x",
            agent="tester",
            workspace=workspace,
            # Each attempt writes its own child's pid: three different change sets.
            model=bash_model("echo $PPID > pick.txt"),
            attempts=3,
            choose=choose,
            apply="on_success",
        )
        assert sup.layers == {}  # the taken one applied, the others discarded
    assert result.attempts is not None and result.attempts.taken == 3
    assert "choose() picked attempt 3" in result.attempts.why
    contents = []
    for attempt in result.attempts.results:
        assert attempt.workspace_mode == "layered" and attempt.changes is not None
        [change] = attempt.changes.changes
        contents.append(change.diff)
    assert len(set(contents)) == 3 and len({r.run_id for r in result.attempts.results}) == 3
    assert result.applied is not None and result.applied.state == "applied"
    assert (workspace / "pick.txt").read_text() in contents[2]  # type: ignore[operator]
    assert len(seen) == 1 and len(seen[0]) == 3


async def test_attempts_are_bounded_and_a_bad_count_is_bad_usage(workspace: Path) -> None:
    async with Supervisor() as sup:
        for bad in (0, 9, "2"):
            with pytest.raises(ValueError, match="attempts"):
                await sup.run("x", workspace=workspace, model=bash_model("true"), attempts=bad)


@needs_overlay
async def test_a_hostile_child_cannot_reach_the_workspaces_real_files_from_its_layer(
    workspace: Path, tmp_path: Path
) -> None:
    shutil.copy(HERE / "layer_attacks.py", workspace / "layer_attacks.py")
    before = snapshot(workspace)
    model = Recorder(
        script(None, turn(call("bash", command="python3 layer_attacks.py")), turn(complete("x")))
    )
    async with Supervisor() as sup:
        result = await sup.run(
            "x", agent="tester", workspace=workspace, model=model, workspace_mode="layered"
        )
        assert snapshot(workspace) == before
        cs = result.changes
        assert cs is not None
        [outputs] = [model.tool_results(p) for p in model.requests[1:2]]
        text = next(iter(outputs.values()))
        report = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
        # Refused outright by the sandbox or the overlay.
        for name in (
            "hard_link_from_tmp",
            "rename_in",
            "rename_dir_out",
            "rename_out",
            "mknod_device",
            "mknod_whiteout",
            "umount_layer",
            "overlay_xattr",
            "staging",
        ):
            assert report[name].startswith("refused"), (name, report[name])
        # Allowed, and all of it in the layer: links and `..` lead back into the overlay.
        for name in ("abs_link", "dotdot", "proc_root", "hard_link", "setuid_file"):
            assert report[name].startswith("ok"), (name, report[name])
        # The overlay's own xattrs are `trusted.` as root: a `user.` one is the child's, and the
        # parent reads nothing into it (the directory is not taken for an opaque one).
        changed = {c.path: c for c in cs.changes}
        assert "dir/inner.txt" not in changed
        assert set(changed) == {"canary.txt", "hard.txt", "suid.sh"}
        assert changed["canary.txt"].diff is not None
        assert "via an absolute link" in changed["canary.txt"].diff
        assert changed["suid.sh"].mode == 0o755  # the setuid bit never carried
        # An absolute link is refused by itself: applying never writes one.
        assert "absolute" in {r.path: r.reason for r in cs.refused}["abs-link"]
        assert all(not os.path.isabs(c.path) and ".." not in c.path for c in cs.changes)
        await sup.discard(result)
        assert not os.path.exists(cs.layer)


@needs_overlay
async def test_a_change_applied_to_the_workspace_meanwhile_does_not_show_through_a_live_layer(
    workspace: Path,
) -> None:
    """The overlay's lower layer is the layer's frozen base (hard links made when the layer
    was): a sibling's change set applied while the run goes on (a file renamed over the
    workspace's) leaves what the child sees as it was when it started."""
    model = Recorder(
        script(
            None,
            turn(call("bash", command="cat canary.txt"), delay=2.0),
            turn(complete("x")),
        )
    )
    async with Supervisor() as sup:
        handle = await sup.start(
            "x", agent="tester", workspace=workspace, model=model, workspace_mode="layered"
        )
        with anyio.fail_after(30):
            while not model.requests:  # the child is up and waiting for its first turn
                await anyio.sleep(0.05)
        (workspace / "canary.new").write_text("a sibling's change\n")
        os.replace(workspace / "canary.new", workspace / "canary.txt")
        result = await handle.result()
    [seen] = model.tool_results(model.requests[1]).values()
    assert "the base" in seen and "sibling" not in seen
    assert result.changes is not None and result.changes.changes == []


async def test_a_provider_that_drives_its_own_child_gets_a_copy_of_the_workspace(
    workspace: Path,
) -> None:
    """The in-process runtime (a child in memory) has no mount namespace to make an overlay
    in: its layer is a copy, its workspace the copy, and the workspace itself is left alone."""
    async with Supervisor() as sup:
        result = await sup.run(
            "x",
            agent="tester",
            workspace=workspace,
            model=bash_model("echo from-inside > inside.txt", "inside.txt"),
            provider="inprocess",
            workspace_mode="layered",
            apply="on_success",
        )
    assert result.success, result.message
    assert result.changes is not None and result.changes.method in ("reflink", "copy")
    assert [c.path for c in result.changes.changes] == ["inside.txt"]
    assert (workspace / "inside.txt").read_text() == "from-inside\n"
    assert result.artifacts[0].path == str(workspace / "inside.txt")


async def test_a_layers_directory_inside_the_workspace_is_bad_usage(workspace: Path) -> None:
    config = ChildConfig(layers_dir=str(workspace / "layers"))
    async with Supervisor(config) as sup:
        with pytest.raises(ValueError, match="must lie apart"):
            await sup.run(
                "x", workspace=workspace, model=bash_model("true"), workspace_mode="layered"
            )


async def test_a_continuable_agent_in_a_layered_workspace_is_bad_usage(workspace: Path) -> None:
    """Its session outlives its child, and a cold resume would find no layer: refused, rather
    than resumed in the shared workspace unasked."""
    async with Supervisor(state_dir=workspace.parent / "state") as sup:
        with pytest.raises(ValueError, match="cold resume"):
            await sup.spawn_agent(
                "x", workspace=workspace, model=bash_model("true"), workspace_mode="layered"
            )
