"""Scripted models for orchestration tests: one model that scripts the orchestrator and every
sub-agent (each run takes the script whose `when` its first request holds), and records every
request it answers, so a test can read what each agent's model was actually sent."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tether.parent import ModelCompleteParams, ModelCompleteResult, ScriptedModel

ORCHESTRATOR = "You are an orchestrator"
Turn = dict[str, Any]


def task(call_id: str, type: str, label: str, prompt: str, **more: Any) -> dict[str, Any]:
    args = {"subagent_type": type, "description": label, "prompt": prompt, **more}
    return {"name": "task", "id": call_id, "arguments": args}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def complete(summary: str, *paths: str) -> dict[str, Any]:
    return call("complete", summary=summary, paths=list(paths))


def turn(*calls: dict[str, Any], text: str = "", delay: float = 0.0, tokens: int = 10) -> Turn:
    return {
        "text": text,
        "toolCalls": list(calls),
        "delay": delay,
        "usage": {"inputTokens": tokens, "outputTokens": 1},
    }


def script(when: str | None, *turns: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {"turns": list(turns)}
    if when is not None:
        out["when"] = when
    return out


class Recorder:
    """A model provider answering from scripts and recording every request, by run."""

    def __init__(self, *scripts: dict[str, Any]) -> None:
        self.model = ScriptedModel.from_json(json.dumps({"scripts": list(scripts)}))
        self.requests: list[ModelCompleteParams] = []
        self.before_answer: Callable[[ModelCompleteParams], None] | None = None

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.requests.append(params)
        if self.before_answer is not None:
            self.before_answer(params)
        return await self.model.complete(params)

    def runs(self, pattern: str) -> list[list[ModelCompleteParams]]:
        """The requests of each run whose first request's system prompt holds `pattern`, in
        the order the runs started."""
        by_run: dict[str, list[ModelCompleteParams]] = {}
        for p in self.requests:
            by_run.setdefault(p.run_id, []).append(p)
        return [
            reqs
            for reqs in by_run.values()
            if any(pattern in m.content for m in reqs[0].messages if m.role == "system")
        ]

    def tool_results(self, params: ModelCompleteParams) -> dict[str, str]:
        """The tool results in one request, by call id."""
        return {m.tool_call_id or "": m.content for m in params.messages if m.role == "tool"}

    def task_output(self, call_id: str) -> dict[str, Any]:
        """The TaskOutput the orchestrator's model was handed for `call_id`."""
        for params in reversed(self.requests):
            got = self.tool_results(params).get(call_id)
            if got is not None:
                return dict(json.loads(got.removeprefix("error: ")))
        raise AssertionError(f"the orchestrator's model never saw a result for {call_id}")
