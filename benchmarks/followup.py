"""The follow-up group of `scripts/bench`: a follow-up to a live continuable run beside an ACP
SDK round trip to an echo agent, sample by sample in the same rounds.

- the reference: `session/prompt` to `benchmarks/children/acp_echo.py` (the
  `agent-client-protocol` package's agent side) driven by the same package's client
  (`ClientSideConnection`, asyncio streams): the agent says the prompt's text back as one
  `agent_message_chunk` and ends the turn; from the call to its `PromptResponse`;
- tether: `RunHandle.message()` to a continuable run (`Supervisor.start(continuation=...)`, the
  supervisor's defaults: the zygote, the sandbox where the host has one) of
  `benchmarks/children/echo_agent.py`, which says the message back as one `text` event and
  finishes: from the call to its `RunResult` — the tree thawed and frozen again around the
  activation, the workspace's watched files looked at before and after, the result built and
  checked, the `RunFinished` event published.

The two take turns one sample at a time (which goes first alternates by round), so a burst of
outside load lands on both alike. No model call is made: neither agent asks for one.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.report import Figure, Results
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.parent.run.spec import Continuation
from tether.parent.supervisor import Supervisor

CHILDREN = Path(__file__).resolve().parent / "children"
ECHO_AGENT = f"{CHILDREN / 'echo_agent.py'}:make"
ACP_ECHO = CHILDREN / "acp_echo.py"
TEXT = "hello"


class _Listener:
    """The ACP client's side: it takes the agent's updates (and asks for nothing else)."""

    def __init__(self) -> None:
        self.updates = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the echo agent asks for no permission")


def _us(ns: int) -> float:
    return ns / 1e3


async def follow_up_group(res: Results, rounds: int, per_round: int, workspace: str) -> None:
    import acp

    s: defaultdict[str, list[float]] = defaultdict(list)
    listener: Any = _Listener()  # the package's `Client` protocol, in the part it calls
    cfg = ChildConfig(command=(*DEFAULT_COMMAND, "--agent", ECHO_AGENT))
    async with (
        acp.spawn_agent_process(listener, sys.executable, "-I", str(ACP_ECHO)) as (conn, _),
        Supervisor(cfg) as sup,
    ):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=workspace)
        handle = await sup.start("hello", workspace=workspace, continuation=Continuation(3600))
        first = await handle.result()
        assert first.success, first.message
        isolation = first.isolation.level if first.isolation is not None else "?"
        prompt: list[Any] = [acp.text_block(TEXT)]

        async def reference() -> None:
            t0 = time.perf_counter_ns()
            answer = await conn.prompt(session_id=session.session_id, prompt=prompt)
            s["floor.acp_prompt"].append(_us(time.perf_counter_ns() - t0))
            assert answer.stop_reason == "end_turn", answer

        async def follow_up() -> None:
            t0 = time.perf_counter_ns()
            got = await handle.message(TEXT)
            s["tether.follow_up_message"].append(_us(time.perf_counter_ns() - t0))
            assert got is not None and got.success and got.summary == TEXT, got

        for rnd in range(rounds + 1):  # round 0 warms both up and is dropped
            pair = (reference, follow_up) if rnd % 2 else (follow_up, reference)
            for _ in range(per_round):
                for step in pair:
                    await step()
            if rnd == 0:
                s.clear()
        handle.close()
        await handle.wait()
    assert listener.updates > 0
    res.add(
        Figure(
            "floor.acp_prompt",
            "ACP `session/prompt` round trip to an echo agent (the ACP Python SDK both ends)",
            "µs",
            s["floor.acp_prompt"],
            "`benchmarks/children/acp_echo.py` (the `agent-client-protocol` package's agent "
            "side) driven by the package's own client over its stdio pipes: the agent says the "
            "prompt back as one `agent_message_chunk` and ends the turn; from `prompt()` to "
            "its `PromptResponse`; in turn with the tether follow-ups, one sample each",
        )
    )
    res.add(
        Figure(
            "tether.follow_up_message",
            "follow-up to a live continuable run (`RunHandle.message`, an echo agent)",
            "µs",
            s["tether.follow_up_message"],
            "`handle.message()` to a run started with `Supervisor.start(continuation=...)` "
            "(the supervisor's defaults: the zygote, isolation "
            f"`{isolation}`) hosting `benchmarks/children/echo_agent.py`, which says the "
            "message back as one `text` event and finishes; from the call to its `RunResult`: "
            "the workspace's watched files read, the tree thawed, `agent/message`, the event "
            "relayed, the answer, the tree frozen again, the watched files read again, the "
            "result built and checked, `RunFinished` published",
            floor="floor.acp_prompt",
        )
    )
