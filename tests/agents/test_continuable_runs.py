"""`Supervisor.start(continuation=...)` without a session: the child stays between answers for
its keep-alive, takes follow-ups (`RunHandle.message`) one at a time, and a follow-up too late
for it is answered `None`, never lost in a dying child."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from agent_models import Commanded

from tether.parent import Continuation, RunFinished, Supervisor
from tether.parent.process.config import ChildConfig

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
