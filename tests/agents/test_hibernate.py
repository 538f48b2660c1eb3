"""Hibernate and wake: an idle agent's child is stopped once its keep-alive passes and woken by
the next message (a cold resume), and a supervisor that restarts finds its agents, each with
its last state, and wakes them. (A restart after a SIGKILL: `test_crash_consistency.py`.)"""

from __future__ import annotations

from pathlib import Path

import anyio
import psutil
import pytest
from agent_models import Commanded

from tether.parent import Supervisor

pytestmark = pytest.mark.anyio


def _alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_restarted_supervisor_lists_its_agents_with_their_last_state_and_wakes_them(
    state: Path, workspace: Path
) -> None:
    model = Commanded()
    async with Supervisor(state_dir=state) as sup:

        async def spawn(prompt: str, label: str, keep_alive: float = 60) -> str:
            agent = await sup.spawn_agent(
                prompt,
                agent="explorer",
                workspace=workspace,
                model=model,
                label=label,
                keep_alive=keep_alive,
            )
            await agent.result()
            return agent.id

        done = await spawn("survey", "done")
        asking = await spawn("ASK which module first?", "asking")
        sleepy = await spawn("nap", "sleepy", keep_alive=0.2)
        cut = await spawn("first", "cut off")
        # The sleepy one hibernates: its keep-alive passes, its child goes, its lease is let go.
        with anyio.fail_after(30):
            while sup.agents.is_warm(sleepy):
                await anyio.sleep(0.02)
        children = [h.pid for h in map(sup.agents.live_handle, (done, asking, cut)) if h]
        assert len(children) == 3 and all(map(_alive, children))
        # One is in the middle of a follow-up when the supervisor closes.
        async with anyio.create_task_group() as tg:
            tg.start_soon(sup.send_message, cut, "STEPS 3 HANG 2")
            with anyio.fail_after(30):
                while len(model.requests) < 5 + 1:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    assert not any(map(_alive, children))  # closing took every child down

    woken = Commanded()
    async with Supervisor(state_dir=state) as again:
        found = {a.label: a for a in await again.list_agents()}
        assert set(found) == {"done", "asking", "sleepy", "cut off"}
        assert found["done"].status == "idle" and found["done"].last_summary == "seen: survey"
        assert found["asking"].status == "needs_input"
        assert found["asking"].question == "which module first?"
        assert found["sleepy"].status == "idle"
        assert found["cut off"].status == "interrupted"  # let go mid-run
        assert all(a.holder is None for a in found.values())  # every lease was released
        assert not any(map(again.agents.is_warm, (done, asking, sleepy, cut)))
        # Each wakes on its next message, cold, with its whole history.
        answer = await again.send_message(asking, "the parser", model=woken)
        assert answer.success
        assert answer.summary == "seen: ASK which module first? | the parser"
        assert again.agents.is_warm(asking)
        resumed = await again.send_message(cut, "go on", model=woken)
        assert resumed.summary == "seen: first | STEPS 3 HANG 2 | go on"
        [request] = [r for r in woken.requests if "go on" in r.messages[-1].content]
        closing = [m for m in request.messages if m.content.startswith("no result was recorded")]
        assert len(closing) == 1  # the call its cut-off turn left open, closed with a note
        assert await again.list_agents(status="needs_input") == []  # answered: none asks now
