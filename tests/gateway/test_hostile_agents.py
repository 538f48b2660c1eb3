"""Hostile foreign agents against the supervisor's gateway, end to end (issue 30, breaks 1 to 3):
the Python ACP test agent (tests/children/acp_agent.py) run by the `acp` provider, sandboxed
where the host can (as root: in a private network namespace whose one listener is its gateway
socket) and at the process level (a loopback listener of its own), floods its gateway address
or sends its model calls all at once, while a sibling run of the same supervisor works."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from gateway_kit import until

from tether.parent import ChildConfig, Supervisor
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    Usage,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENT = Path(__file__).parent.parent / "children" / "acp_agent.py"
ACP = f"acp:{sys.executable} {AGENT}"
QUICK = DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=2.0)


class Slow:
    """Answers every call after `delay` seconds with the same usage, and counts calls."""

    def __init__(self, text: str, usage: Usage, delay: float = 0.0) -> None:
        self.text = text
        self.usage = usage
        self.delay = delay
        self.calls: list[ModelCompleteParams] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.calls.append(params)
        await anyio.sleep(self.delay)
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content=self.text), usage=self.usage
        )


def texts(events: list[Event]) -> list[str]:
    return [e.data["text"] for e in events if isinstance(e, ChildEvent) and e.kind == "text"]


def said(events: list[Event], prefix: str) -> Any:
    """The JSON an agent said after `prefix` (its last such message)."""
    lines = [t for t in texts(events) if t.startswith(prefix)]
    assert lines, texts(events)
    return json.loads(lines[-1][len(prefix) :])


POST: dict[str, Any] = {
    "url": "$ANTHROPIC_BASE_URL/v1/messages",
    "headers": {"x-api-key": "$ANTHROPIC_API_KEY"},
    "body": {"model": "any", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
}


@pytest.mark.parametrize("isolation", ["process", "auto"])
async def test_an_agent_flooding_its_gateway_address_cannot_stop_a_sibling_runs_calls(
    tmp_path: Path, isolation: str
) -> None:
    """The issue's break 2: one agent holds 320 idle connections to its own gateway address
    and 40 more with unfinished bodies under its token. Its own pool keeps 16; the sibling
    run's five model calls are all answered, and the flooder holds none of the gateway's
    memory beyond its own bound."""
    flood = [
        {"flood": {"connections": 320}},
        {"flood": {"connections": 40, "declare": 1_000_000, "send": 100_000, "token": True}},
        {"say": "holding"},
        {"wait": 120},
    ]
    polite = [{"post": POST} for _ in range(5)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    events_a: list[Event] = []
    events_b: list[Event] = []
    model = Slow("served", Usage(input_tokens=5, output_tokens=2))
    async with Supervisor(ChildConfig(isolation=isolation, dispose=QUICK)) as sup:
        with anyio.fail_after(150):
            flooder = await sup.start(
                json.dumps(flood),
                workspace=tmp_path / "a",
                model=model,
                provider=ACP,
                on_event=events_a.append,
            )
            await until(lambda: "holding" in texts(events_a), 90)
            gateway = await sup.gateway()
            assert gateway.server.connections <= 16
            sibling = await sup.run(
                json.dumps(polite),
                workspace=tmp_path / "b",
                model=model,
                provider=ACP,
                on_event=events_b.append,
            )
            assert gateway.server.connections <= 16  # the flooder's still, the sibling's gone
            peak = gateway.server.peak_held_bytes
            await flooder.cancel("enough")
            await flooder.result()
    assert sibling.success, sibling
    assert [t for t in texts(events_b) if t.startswith("status")] == [
        t for t in texts(events_b) if t.startswith("status 200") and "served" in t
    ]
    assert sum(t.startswith("status 200") for t in texts(events_b)) == 5
    idle, holding = [
        json.loads(t[len("flood: ") :]) for t in texts(events_a) if t.startswith("flood: ")
    ]
    assert idle["opened"] + idle["failed"] == 320 and idle["answers"].get("open", 0) <= 16
    assert holding["answers"].get("open", 0) <= 16  # the rest were closed at the accept
    # Only what its sixteen admitted requests sent (and the sibling's small bodies).
    assert peak <= 16 * 100_000 + 5 * 1000
    assert len(model.calls) == 5  # the flooder's unfinished requests never reached the model


@pytest.mark.parametrize("token", [False, True])
async def test_an_agent_sending_huge_unfinished_bodies_holds_at_most_its_runs_bound(
    tmp_path: Path, token: bool
) -> None:
    """The issue's break 1 as an agent does it: 23 connections each declaring the run's largest
    request (32 MiB) and sending part of it, never the rest. Without its token every one is
    refused from its head, nothing buffered; with it the run's held-bytes bound (64 MiB,
    reserved by the declared length) admits two and refuses the rest from their heads."""
    declared = 32 * 1024 * 1024
    steps = [
        {"flood": {"connections": 23, "declare": declared, "send": 1 << 20, "token": token}},
        {"say": "done"},
    ]
    events: list[Event] = []
    async with Supervisor(ChildConfig(isolation="process", dispose=QUICK)) as sup:
        with anyio.fail_after(90):
            result = await sup.run(
                json.dumps(steps),
                workspace=tmp_path,
                model=Slow("x", Usage()),
                provider=ACP,
                on_event=events.append,
            )
            gateway = await sup.gateway()
    assert result.success, result
    answers = said(events, "flood: ")["answers"]
    if token:
        # The two admitted wait for their bodies; the rest were refused (429) from their heads,
        # or closed at the accept while the refused ones still held the run's pool of 16.
        assert answers["open"] == 2 and answers.get("429", 0) >= 1
        assert sum(answers.values()) == 23 and set(answers) <= {"open", "429", "closed"}
        assert gateway.server.peak_held_bytes <= 2 << 20
    else:
        assert answers == {"401": 23}
        assert gateway.server.peak_held_bytes == 0


async def test_an_agent_sending_its_calls_together_gets_no_more_than_its_step_budget(
    tmp_path: Path,
) -> None:
    """The issue's break 3 for a foreign agent: `maxSteps 2` and a 3,000-token budget, 32
    model calls at once through the gateway. Two are answered; the rest are refused before
    they reach the model, and the run ends `budget_exhausted`."""
    model = Slow("answer", Usage(input_tokens=500, output_tokens=100), delay=0.3)
    agent = AgentDefinition(type="general", description="g", max_iterations=2, token_budget=3000)
    steps = [{"burst": {"count": 32, "post": POST}}, {"say": "after the burst"}]
    events: list[Event] = []
    async with Supervisor(ChildConfig(dispose=QUICK)) as sup:
        with anyio.fail_after(90):
            result = await sup.run(
                json.dumps(steps),
                workspace=tmp_path,
                agent=agent,
                model=model,
                provider=ACP,
                on_event=events.append,
            )
    assert len(model.calls) == 2
    assert result.failure is not None and result.failure.kind == "budget_exhausted", result
    assert result.iteration_count == 2
    assert result.usage == Usage(input_tokens=1000, output_tokens=200)
