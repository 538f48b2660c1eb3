"""A network policy through an orchestration: the orchestration's policy (`config=`) bounds every
sub-agent's, a definition's own `network` narrows it, and a definition without one gets the
orchestration's. Real orchestrator and sub-agent children, sandboxed, driving `curl` through
their own runs' proxies; loopback servers play the hosts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from egress_kit import site

from tether.parent import ChildConfig, ModelCompleteParams, ModelCompleteResult, Supervisor
from tether.parent.delegation import SubagentDefinition
from tether.parent.egress.addresses import NameTable
from tether.parent.egress.seat import EgressOptions
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.isolation import probe_host
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import Event
from tether.parent.run.subagent_events import SubagentProgress

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(probe_host().why_not is not None, reason="no sandbox here"),
]


def turn(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": "", "toolCalls": list(calls)}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "id": f"{name}-{len(json.dumps(arguments))}", "arguments": arguments}


class Recording:
    def __init__(self, scripts: list[dict[str, Any]]) -> None:
        self.model = ScriptedModel.from_json(json.dumps({"scripts": scripts}))
        self.requests: list[ModelCompleteParams] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.requests.append(params)
        return await self.model.complete(params)

    def bash_output(self, marker: str) -> str:
        """What `bash` answered in the run whose task says `marker`."""
        for p in self.requests:
            if any(marker in m.content for m in p.messages if m.role == "user"):
                tools = [m.content for m in p.messages if m.role == "tool"]
                if tools:
                    return tools[0]
        return ""


async def test_a_sub_agent_gets_at_most_its_orchestrations_network(tmp_path: Path) -> None:
    with site("pkg.test") as pkg, site("other.test") as other:
        pkg_url = f"http://pkg.test:{pkg.port}/hello"
        other_url = f"http://other.test:{other.port}/hello"
        curl = f"curl -sS -m 20 {pkg_url}; echo; curl -sS -m 20 {other_url}"
        sub = [turn(call("bash", command=curl)), turn(call("complete", summary="fetched"))]
        model = Recording(
            [
                {
                    "when": "You are an orchestrator",
                    "turns": [
                        turn(
                            call(
                                "task",
                                subagent_type="narrow",
                                description="narrow",
                                prompt="NARROW-TASK: fetch",
                            )
                        ),
                        turn(
                            call(
                                "task",
                                subagent_type="wide",
                                description="wide",
                                prompt="WIDE-TASK: fetch",
                            )
                        ),
                        turn(call("complete", summary="done")),
                    ],
                },
                {"turns": sub},
            ]
        )
        definitions = [
            SubagentDefinition(
                type="narrow",
                description="fetches",
                read_only=False,
                network=[f"pkg.test:{pkg.port}"],
            ),
            SubagentDefinition(type="wide", description="fetches more", read_only=False),
        ]
        cfg = ChildConfig(
            isolation="sandbox",
            handshake_timeout=30.0,
            dispose=DisposePolicy(shutdown=0.5, eof=1.0, term=1.0, kill=2.0),
            network=[f"pkg.test:{pkg.port}", f"other.test:{other.port}"],
        )
        ws = tmp_path / "ws"
        ws.mkdir()
        events: list[Event] = []
        names = NameTable({"pkg.test": "127.0.0.1", "other.test": "127.0.0.1"})
        async with Supervisor(cfg, egress=EgressOptions(resolver=names)) as sup:
            with anyio.fail_after(240):
                got = await sup.orchestrate(
                    "Fetch.",
                    model=model,
                    definitions=definitions,
                    workspace=ws,
                    config=cfg,
                    on_event=events.append,
                )
    assert got.success, got.result
    narrow, wide = model.bash_output("NARROW-TASK"), model.bash_output("WIDE-TASK")
    assert "hello from pkg.test" in narrow and "hello from other.test" not in narrow, narrow
    assert "other.test is not in the network policy" in narrow
    assert "hello from pkg.test" in wide and "hello from other.test" in wide, wide
    # Each sub-agent's proxy decisions reach the orchestration's listener as its progress.
    denied = [e.data for e in events if isinstance(e, SubagentProgress) and e.kind == "net.denied"]
    assert [(d["host"], d["port"]) for d in denied] == [("other.test", other.port)]
    assert (
        "orchestration" in denied[0]["reason"] or "not in the network policy" in denied[0]["reason"]
    )
    assert len(other.seen) == 1  # the wide sub-agent's request alone
