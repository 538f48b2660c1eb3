"""A continuable agent started by `fork` (`spawn_agent(provider="fork", fork_from=RUN)`): its
session starts with the turns of the run it was forked from, so a cold resume — here, or in a
supervisor that never saw the spawn — carries them. A provider that runs its agent once
cannot start a continuable agent, and the error says why and which providers can."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from agent_models import Commanded, users

from tether.parent import Supervisor
from tether.parent.agents.sessions import SessionStore

pytestmark = pytest.mark.anyio


async def test_a_forked_agent_is_resumed_cold_with_the_turns_it_was_forked_from(
    state: Path, workspace: Path
) -> None:
    model = Commanded()
    async with Supervisor(state_dir=state) as sup:
        source = await sup.start("survey STEPS 2", workspace=workspace, model=model)
        assert (await source.result()).success
        agent = await sup.spawn_agent(
            "go on from there",
            agent="explorer",
            workspace=workspace,
            model=model,
            provider="fork",
            fork_from=source,
            keep_alive=0,
        )
        first = await agent.result()
        assert first.summary == "seen: survey STEPS 2 | go on from there"
        with anyio.fail_after(10):
            await agent.run.wait()  # keep_alive=0: the child is gone
        cold = await sup.send_message(agent.id, "and now?")
        assert cold.summary == "seen: survey STEPS 2 | go on from there | and now?"
        assert cold.run_id != first.run_id
    async with SessionStore(state) as store:
        detail = await store.show(agent.id)
    assert detail is not None
    assert users(detail.transcript)[:2] == ["survey STEPS 2", "go on from there"]
    # The forked turns hold the source's completed tool call and its result, as brokered.
    forked = detail.transcript[1:3]
    assert [m.role for m in forked] == ["assistant", "tool"]
    assert forked[0].tool_calls[0].name == "list_dir"

    async with Supervisor(state_dir=state) as elsewhere:
        again = await elsewhere.send_message(agent.id, "still?", model=model)
    assert again.summary == "seen: survey STEPS 2 | go on from there | and now? | still?"


@pytest.mark.parametrize(
    ("provider", "why"),
    [("acp:true", "tether does not keep an ACP agent's session after its prompt is answered")],
)
async def test_a_provider_that_runs_its_agent_once_cannot_start_a_continuable_agent(
    state: Path, workspace: Path, provider: str, why: str
) -> None:
    name = provider.split(":")[0]
    async with Supervisor(state_dir=state) as sup:
        with pytest.raises(ValueError) as refused:
            await sup.spawn_agent(
                "x", workspace=workspace, model=Commanded(), provider=provider, keep_alive=0
            )
        assert await sup.list_agents() == []  # refused before anything was stored
    message = str(refused.value)
    assert message.startswith(f"provider {name!r} runs its agent once: {why}")
    assert message.endswith(
        "only a tether child keeps a run for follow-ups: use spawn, fork, command, inprocess "
        "(a command's child must announce agentMessage)"
    )
