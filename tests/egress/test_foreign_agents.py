"""A foreign agent (the Python ACP test agent, run by the `acp` provider) with a network policy:
its model calls go to the parent's gateway, its other HTTP through the run's egress proxy;
both listeners sit in its private network namespace as root (a loopback port each without),
and nothing else is reachable."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from egress_kit import site

from tether.parent.egress.addresses import NameTable
from tether.parent.egress.events import NetEvent
from tether.parent.egress.seat import EgressOptions
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.isolation import probe_host
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENT = Path(__file__).parent.parent / "children" / "acp_agent.py"
ACP = f"acp:{sys.executable} {AGENT}"
QUICK = DisposePolicy(shutdown=0.5, eof=1.0, term=1.0, kill=2.0)
GATEWAY: dict[str, Any] = {
    "url": "$ANTHROPIC_BASE_URL/v1/messages",
    "headers": {"x-api-key": "$ANTHROPIC_API_KEY"},
    "body": {"model": "any", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
}


def texts(events: list[Event]) -> list[str]:
    return [e.data["text"] for e in events if isinstance(e, ChildEvent) and e.kind == "text"]


@pytest.mark.skipif(probe_host().why_not is not None, reason="no sandbox here")
async def test_an_acp_agent_reaches_its_gateway_and_an_allowed_host_and_nothing_else(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    with site("pkg.test") as pkg, site("other.test") as other:
        names = NameTable({"pkg.test": "127.0.0.1", "other.test": "127.0.0.1"})
        steps = [
            {"post": GATEWAY},
            {"post": {"url": f"http://pkg.test:{pkg.port}/upload", "body": {"x": 1}}},
            {"post": {"url": f"http://other.test:{other.port}/upload", "body": {"x": 1}}},
            {"connect": ["127.0.0.1", other.port]},
        ]
        cfg = ChildConfig(isolation="sandbox", dispose=QUICK, network=[f"pkg.test:{pkg.port}"])
        async with Supervisor(cfg, egress=EgressOptions(resolver=names)) as sup:
            with anyio.fail_after(120):
                result = await sup.run(
                    json.dumps(steps),
                    workspace=tmp_path,
                    model=ScriptedModel.from_json('[{"text": "gateway answers"}]'),
                    provider=ACP,
                    on_event=events.append,
                )
    assert result.success, result
    said = texts(events)
    assert any("status 200" in t and "gateway answers" in t for t in said), said  # NO_PROXY
    assert any(t.startswith("status 200: got 8 bytes") for t in said), said
    assert any(
        t.startswith("status 403") and "other.test is not in the network policy" in t for t in said
    ), said
    assert any(t.startswith(f"connect 127.0.0.1:{other.port}: E") for t in said), said
    assert other.seen == [] and [s.path for s in pkg.seen] == ["/upload"]
    net = [e for e in events if isinstance(e, NetEvent)]
    assert {(e.kind, e.host) for e in net} == {
        ("net.allowed", "pkg.test"),
        ("net.denied", "other.test"),
    }
    assert result.isolation is not None and result.isolation.network.allowed == 1
