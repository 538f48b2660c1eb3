"""A task call the MCP client cancels is stopped, and measured: MCP never answers a cancelled
request, so the stop's receipt is the server's log line on stderr, checked here against what
the call was doing (its one sub-agent on a minute-long model turn)."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from harness import (
    SLOW,
    WAIT,
    Progress,
    gone,
    model_script,
    serve,
    sub_agents,
    task_args,
    workspace,
)

pytestmark = pytest.mark.anyio

RECEIPT = re.compile(
    r"call 1 \(task\): stopped \(cancelled by the MCP client\): asked \d\d:\d\d:\d\d, everything "
    r"gone [\d.]+ s later \(1 run, ladder rung (\w+)\); 0 processes left, 0 model turns admitted "
    r"after the stop \(1 in flight abandoned\), 0 tokens billed after it"
)


async def test_a_cancelled_task_call_logs_the_receipt_of_its_stop(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    script = model_script(tmp_path / "model.json")
    progress = Progress()
    args = ["--model", f"scripted:{script}", "--workspace", str(ws)]
    async with serve(tmp_path, *args) as server:
        children: list[int] = []
        with anyio.CancelScope() as scope:

            async def cancel_once_thinking() -> None:
                await progress.wait_for(r": next step \(step 1,")
                await anyio.sleep(0.3)  # its first model turn (a minute long) is under way
                children.extend(sub_agents(server.pid))
                scope.cancel()  # the SDK sends notifications/cancelled for the request

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_once_thinking)
                await server.session.call_tool(
                    "task", task_args(prompt=f"Look. {SLOW}"), progress_callback=progress
                )
        assert children and await gone(children) == []
        with anyio.fail_after(WAIT):
            while RECEIPT.search(server.log()) is None:
                await anyio.sleep(0.05)
        after = await server.session.call_tool("task", task_args())
    match = RECEIPT.search(server.log())
    assert match is not None and match.group(1) != "none"
    assert not after.is_error  # the server goes on serving
