"""`Supervisor.start(continuation=...)` without a session: the child stays between answers for
its keep-alive, takes follow-ups (`RunHandle.message`) one at a time, and a follow-up too late
for it is answered `None`, never lost in a dying child."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import anyio
import pytest
from agent_models import Commanded

from tether.parent import Continuation, RunFinished, Supervisor
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""


async def test_a_continuable_run_takes_follow_ups_until_it_is_closed(workspace: Path) -> None:
    reports: list[str] = []
    finished: list[str] = []

    async def on_report(text: str) -> None:
        reports.append(text)

    async with Supervisor() as sup:
        sup.subscribe(
            lambda ev: finished.append(ev.result.summary) if isinstance(ev, RunFinished) else None
        )
        handle = await sup.start(
            "first",
            agent="explorer",
            workspace=workspace,
            model=Commanded(),
            continuation=Continuation(60, on_report=on_report),
        )
        assert (await handle.result()).summary == "seen: first"
        pid = handle.pid
        second = await handle.message("second REPORT half way")
        assert second is not None and second.summary == "seen: first | second REPORT half way"
        assert second.turn_count == 1 and second.iteration_count == 1  # the activation's own
        results: list[str] = []

        async def send(text: str) -> None:
            got = await handle.message(text)
            assert got is not None
            results.append(got.summary.rsplit(" | ", 1)[-1])

        async with anyio.create_task_group() as tg:  # queued, served in order
            for text in ("a", "b", "c"):
                tg.start_soon(send, text)
                await anyio.sleep(0.01)
        assert results == ["a", "b", "c"] and handle.pid == pid
        handle.close()
        await handle.wait()
        assert await handle.message("too late") is None
    assert reports == ["half way"]
    assert finished[:2] == ["seen: first", "seen: first | second REPORT half way"]
    assert len(finished) == 5  # one RunFinished per activation


@pytest.mark.in_memory
async def test_a_run_that_is_not_continuable_takes_no_follow_up(workspace: Path) -> None:
    async with Supervisor(IN_MEMORY) as sup:
        handle = await sup.start("once", workspace=workspace, model=Commanded())
        await handle.result()
        with pytest.raises(RuntimeError, match="not continuable"):
            await handle.message("again")


@pytest.mark.in_memory
async def test_a_follow_up_whose_caller_gives_up_cuts_the_activation_and_the_child(
    workspace: Path,
) -> None:
    async with Supervisor(IN_MEMORY) as sup:
        handle = await sup.start(
            "first", workspace=workspace, model=Commanded(), continuation=Continuation(60)
        )
        await handle.result()
        with anyio.move_on_after(0.5):
            await handle.message("SLEEP 30")
        with anyio.fail_after(20):
            await handle.wait()  # cut mid-work: the child is disposed, not kept
        assert await handle.message("again") is None


async def test_each_activation_lists_what_it_changed_of_the_files_the_users_tools_run(
    workspace: Path,
) -> None:
    """The watch is taken around each activation, while the child's tree is held still in
    between: a change made between activations is no activation's."""
    async with Supervisor() as sup:
        handle = await sup.start(
            "first WRITE .envrc",
            agent="tester",
            workspace=workspace,
            model=Commanded(),
            continuation=Continuation(60),
        )
        first = await handle.result()
        assert [(c.path, c.change) for c in first.sensitive_changes] == [(".envrc", "added")]
        (workspace / "Makefile").write_text("all:\n")  # the user's own, between activations
        second = await handle.message("second WRITE .vscode/tasks.json")
        assert second is not None and second.success, second
        assert [(c.path, c.change) for c in second.sensitive_changes] == [
            (".vscode/tasks.json", "added")
        ]
        assert second.sensitive_changes[0].content == "planted\n"
        handle.close()
        await handle.wait()


async def test_a_follow_up_longer_than_the_keep_alive_is_not_cut_and_the_wait_starts_again(
    workspace: Path,
) -> None:
    """A follow-up is driven in its caller's task: nothing ends the run under it, and the
    keep-alive counts again from the end of each activation."""
    async with Supervisor() as sup:
        handle = await sup.start(
            "first", workspace=workspace, model=Commanded(), continuation=Continuation(1.0)
        )
        await handle.result()
        with anyio.fail_after(30):
            slow = await handle.message("SLEEP 1.5")  # longer than the keep-alive
            assert slow is not None and slow.success, slow
            for text in ("a", "b", "c"):  # 0.6 s apart: 1.8 s in all, never 1 s idle
                await anyio.sleep(0.6)
                got = await handle.message(text)
                assert got is not None and got.summary.endswith(f"| {text}"), got
            await anyio.sleep(1.5)  # now idle past it: the child goes
            await handle.wait()
        assert await handle.message("too late") is None


async def test_a_supervisor_that_closes_during_a_follow_up_gives_its_caller_a_result(
    workspace: Path,
) -> None:
    got: list[RunResult | None] = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg, Supervisor() as sup:
            handle = await sup.start(
                "first", workspace=workspace, model=Commanded(), continuation=Continuation(60)
            )
            await handle.result()

            async def ask() -> None:
                got.append(await handle.message("SLEEP 30"))

            tg.start_soon(ask)
            await anyio.sleep(0.5)
        # the supervisor is closed: its runs were cut, the follow-up's caller answered
    (result,) = got
    assert result is not None and not result.success
    assert result.failure is not None and result.failure.kind == "cancelled", result


async def test_a_follow_up_the_child_refuses_leaves_it_thawed_for_its_polite_dispose(
    workspace: Path,
) -> None:
    """The tree begins to freeze the moment the child answers; an answer that is a refusal
    ends the run, and the child, let go before its ladder, answers `shutdown`."""
    agent = f"{Path(__file__).resolve().parents[2] / 'benchmarks/children/tiny_agent.py'}:make"
    config = ChildConfig(command=(*DEFAULT_COMMAND, "--agent", agent))
    async with Supervisor(config) as sup:
        handle = await sup.start("first", workspace=workspace, continuation=Continuation(60))
        assert (await handle.result()).success
        with anyio.fail_after(20):
            refused = await handle.message("again")  # the tiny agent cannot be continued
            await handle.wait()
    assert refused is not None and not refused.success
    assert refused.failure is not None and refused.failure.kind == "agent_error", refused
    assert "cannot be continued" in refused.message
    assert refused.failure.rung == "shutdown", refused.failure


async def test_the_cgroup_files_a_supervisor_keeps_open_are_closed_with_its_children(
    workspace: Path,
) -> None:
    """A held child's cgroup keeps its freezer open between activations, and every cgroup
    keeps what its dispose reads; all of it is closed once the children are gone."""

    def cgroup_files() -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith("/sys/fs/cgroup/"):
                    found.append(target)
        return found

    before = cgroup_files()
    async with Supervisor() as sup:
        handle = await sup.start(
            "first", workspace=workspace, model=Commanded(), continuation=Continuation(60)
        )
        await handle.result()
        second = await handle.message("second")
        assert second is not None and second.success
        held = cgroup_files()
        handle.close()
        await handle.wait()
    assert cgroup_files() == before
    if second.containment in ("cgroup2", "hybrid"):  # a v2 cgroup with its freezer
        assert any(f.endswith("/cgroup.freeze") for f in held), held
