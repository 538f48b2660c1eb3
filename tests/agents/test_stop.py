"""Stopping a continuable agent: the activation in progress is asked to abort, its model turn in
flight is abandoned, the child is taken down, and the result carries the stop's receipt; the
session stays, and the next message wakes the agent with its whole history."""

from __future__ import annotations

from pathlib import Path

import anyio
import psutil
import pytest
from agent_models import Commanded

from tether.parent import Supervisor
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio


def _alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_stopping_an_agent_mid_activation_returns_its_receipt_and_keeps_the_session(
    state: Path, workspace: Path
) -> None:
    model = Commanded()
    async with Supervisor(state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "first", agent="explorer", workspace=workspace, model=model, keep_alive=60
        )
        await agent.result()
        child = agent.run.pid
        sent: list[RunResult] = []
        async with anyio.create_task_group() as tg:

            async def follow_up() -> None:
                sent.append(await sup.send_message(agent.id, "STEPS 3 HANG 2"))

            tg.start_soon(follow_up)
            with anyio.fail_after(30):
                while model.in_flight == 0 or len(model.requests) < 3:
                    await anyio.sleep(0.02)  # the follow-up's second turn hangs in the model
            calls = len(model.requests)
            stopped = await sup.agents.stop(agent.id, "enough")
        assert stopped is not None and stopped.stop is not None
        receipt = stopped.stop
        assert (receipt.reason, receipt.runs, receipt.processes_left) == ("enough", 1, 0)
        assert (receipt.turns_after_stop, receipt.turns_abandoned) == (0, 1)
        assert receipt.tokens_after_stop == 0 and receipt.rung != "none"
        assert len(model.requests) == calls and model.in_flight == 0  # abandoned, none more
        # The caller of the stopped follow-up got the same result, stored before it returned.
        [answer] = sent
        assert answer.stop == receipt and answer.status == "aborted"
        assert not _alive(child) and not sup.agents.is_warm(agent.id)
        [summary] = await sup.list_agents()
        assert summary.status == "aborted" and summary.holder is None
        # One turn was answered (10 in, 5 out) before the stop; the abandoned one is not billed.
        assert answer.usage.input_tokens == 10 and answer.usage.output_tokens == 5

        woken = await sup.send_message(agent.id, "go on")
        assert woken.success and woken.summary == "seen: first | STEPS 3 HANG 2 | go on"
        second = sup.agents.live_handle(agent.id)
        assert second is not None
        idle = await sup.agents.stop(agent.id)  # between activations: the child goes
        assert idle is not None and idle.stop is not None
        assert idle.status == "aborted" and "between activations" in idle.message
        assert (idle.stop.runs, idle.stop.processes_left, idle.stop.turns_abandoned) == (1, 0, 0)
        assert not _alive(second.pid)
        assert await sup.agents.stop(agent.id) is None  # nothing of it lives here now
        [summary] = await sup.list_agents()
        assert summary.status == "idle"  # its last answer stands
