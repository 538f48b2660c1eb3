"""A deterministic model: answers `model/complete` from a JSON file of turns.

File format (a list, or an object with `"turns"`)::

    {"turns": [
      {"text": "Looking at the files.",
       "toolCalls": [{"name": "complete", "arguments": {"summary": "done", "paths": []}}],
       "usage": {"inputTokens": 10, "outputTokens": 5},
       "delay": 0.1}
    ]}

Each run (by `runId`) walks the turns from the first; a run that asks for more turns than the
script holds gets a MODEL_ERROR, which the child reports as the run's failure. Compaction
requests (`purpose: "compaction"`) are answered with a fixed summary and do not use up turns.

One file can script several agents (an orchestrator and its sub-agents, say): an object with
`"scripts"`, each a `"turns"` list with an optional `"when"`, a regular expression. A run takes
the first script whose `when` is found in its first request (the text of every message, the
system prompt and the task included; a script without `when` matches any run) and keeps it;
a script with `"once": true` is taken by one run only (a later run looks further)::

    {"scripts": [
      {"when": "You are an orchestrator", "turns": [...]},
      {"when": "Role: verifier(?s:.*)fixed the guard", "turns": [...]},
      {"turns": [...]}
    ]}
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import anyio
import msgspec

from tether.parent.models.files import read_bounded
from tether.protocol import ErrorCode, RemoteError
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    Usage,
)

MAX_SCRIPT_BYTES = 16 * 1024 * 1024
"""The largest model script read."""


class ScriptedCall(msgspec.Struct, frozen=True, rename="camel"):
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None


class ScriptedTurn(msgspec.Struct, frozen=True, rename="camel"):
    text: str = ""
    tool_calls: list[ScriptedCall] = msgspec.field(default_factory=list)
    usage: Usage | None = None
    delay: float = 0.0
    error: str | None = None
    """Answer this turn with a MODEL_ERROR carrying this message."""


class Script(msgspec.Struct, frozen=True):
    turns: list[ScriptedTurn]
    when: str | None = None
    """A regular expression searched in a run's first request; `None` matches any run."""
    once: bool = False
    """Taken by one run only: a later run that matches looks further (several attempts at one
    task, each scripted apart)."""


class Scripts(msgspec.Struct, frozen=True):
    scripts: list[Script]


class ScriptedModel:
    def __init__(
        self,
        turns: list[ScriptedTurn] | None = None,
        name: str = "scripted",
        *,
        scripts: list[Script] | None = None,
    ) -> None:
        if scripts is None:
            scripts = [Script(turns=list(turns or []))]
        elif turns is not None:
            raise ValueError("a scripted model takes turns or scripts, not both")
        self.scripts = scripts
        self.turns = scripts[0].turns if len(scripts) == 1 else []
        """The turns of a single-script model."""
        self.name = name
        try:
            self._when = [None if s.when is None else re.compile(s.when) for s in scripts]
        except re.error as exc:
            raise ValueError(f"bad model script {name}: a `when` pattern: {exc}") from None
        self._chosen: dict[str, int] = {}
        self._cursor: dict[str, int] = {}
        self._ids = itertools.count(1)

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Read a script: a regular file of at most `MAX_SCRIPT_BYTES`, never a FIFO or a
        device (opened without blocking, checked before any read). Blocking file I/O: callers
        on an event loop run it in a worker thread."""
        p = Path(path)
        data = read_bounded(p, MAX_SCRIPT_BYTES, "model script")
        return cls.from_json(data, name=f"scripted:{p}")

    @classmethod
    def from_json(cls, data: bytes | str, name: str = "scripted") -> ScriptedModel:
        try:
            raw = data.encode() if isinstance(data, str) else data
            if raw.lstrip()[:1] == b"[":
                turns = msgspec.json.decode(raw, type=list[ScriptedTurn])
            else:
                obj = msgspec.json.decode(raw)
                if isinstance(obj, dict) and "scripts" in obj:
                    scripts = msgspec.convert(obj, type=Scripts).scripts
                    return cls(name=name, scripts=scripts)
                turns = msgspec.convert(obj, type=Script).turns
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ValueError(f"bad model script {name}: {exc}") from exc
        return cls(turns, name)

    def _script_of(self, params: ModelCompleteParams) -> list[ScriptedTurn]:
        """The run's script, chosen on its first turn; raises MODEL_ERROR when none matches."""
        chosen = self._chosen.get(params.run_id)
        if chosen is None:
            text = "\n".join(m.content for m in params.messages)
            taken = set(self._chosen.values())
            for i, pattern in enumerate(self._when):
                if self.scripts[i].once and i in taken:
                    continue
                if pattern is None or pattern.search(text):
                    chosen = self._chosen[params.run_id] = i
                    break
            else:
                raise RemoteError(
                    ErrorCode.MODEL_ERROR,
                    f"the scripted model has no script for this run (none of the {len(self._when)}"
                    " `when` patterns is found in its first request)",
                )
        return self.scripts[chosen].turns

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        if params.purpose == "compaction":
            return ModelCompleteResult(
                message=ChatMessage(role="assistant", content="(summary of earlier turns)"),
                usage=Usage(),
            )
        turns = self._script_of(params)
        i = self._cursor.get(params.run_id, 0)
        if i >= len(turns):
            raise RemoteError(
                ErrorCode.MODEL_ERROR,
                f"the scripted model has no turn {i + 1} (the script holds {len(turns)})",
            )
        self._cursor[params.run_id] = i + 1
        turn = turns[i]
        if turn.delay > 0:
            await anyio.sleep(turn.delay)
        if turn.error is not None:
            raise RemoteError(ErrorCode.MODEL_ERROR, turn.error)
        calls = [
            ToolCall(id=c.id or f"call_{next(self._ids)}", name=c.name, arguments=c.arguments)
            for c in turn.tool_calls
        ]
        usage = turn.usage or Usage(
            input_tokens=sum(len(m.content) // 4 + 1 for m in params.messages),
            output_tokens=len(turn.text) // 4 + 1,
        )
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content=turn.text, tool_calls=calls),
            usage=usage,
            stop_reason="tool_use" if calls else "end_turn",
        )
