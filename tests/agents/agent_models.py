"""A model for continuable-agent tests that does what the latest user message says, so a test
drives a real child through warm and cold activations and sees the history it was given.

Each turn is logged (with `log`) as `{"event": "turn", "runId", "messages", "at"}` before it
is answered. The latest user message is read as commands (several may be combined):

    ASK <question>       call ask_orchestrator with the question (the run answers needs_input)
    REPORT <text>        call report with the text before completing
    SLEEP <seconds>      wait that long before answering each turn of this activation
    STEPS <n>            take n turns: n - 1 calling list_dir, then complete
    HANG <n>             never answer the n-th turn after the message (a test kills the parent)
    WRITE <path>         first write `planted` to that file (write_file), then go on
    anything else        complete at once

`complete`'s summary is `seen: ` and every user message of the transcript joined by ` | `, so
the summary says which history the child was given. Every turn costs 10 input and 5 output
tokens. Each request is kept (`requests`), and the model counts how many turns are in flight at
once, per run and in total.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from typing import TextIO

import anyio

from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    Usage,
)

TURN_USAGE = Usage(input_tokens=10, output_tokens=5)


def users(messages: list[ChatMessage]) -> list[str]:
    return [m.content for m in messages if m.role == "user"]


class Commanded:
    def __init__(self, log: TextIO | None = None) -> None:
        self.requests: list[ModelCompleteParams] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._ids = itertools.count(1)
        self._log = log

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.requests.append(params)
        if self._log is not None:
            # One line per request, before answering: a watcher knows the turn was asked.
            line = {
                "event": "turn",
                "runId": params.run_id,
                "messages": len(params.messages),
                "at": time.time(),
            }
            print(json.dumps(line), file=self._log, flush=True)
        said = users(params.messages)[-1] if users(params.messages) else ""
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            sleep = re.search(r"SLEEP (\d+(?:\.\d+)?)", said)
            if sleep:
                await anyio.sleep(float(sleep.group(1)))
            hang = re.search(r"HANG (\d+)", said)
            if hang and _turns_since_user(params.messages) + 1 == int(hang.group(1)):
                await anyio.sleep_forever()
            return self._answer(params, said)
        finally:
            self.in_flight -= 1

    def _call(self, name: str, **arguments: object) -> ToolCall:
        return ToolCall(id=f"t{next(self._ids)}", name=name, arguments=dict(arguments))

    def _answer(self, params: ModelCompleteParams, said: str) -> ModelCompleteResult:
        calls: list[ToolCall] = []
        steps = re.search(r"STEPS (\d+)", said)
        since_user = _turns_since_user(params.messages)
        ask = re.search(r"ASK (.+?)(?: REPORT |$)", said)
        report = re.search(r"REPORT (.+?)(?: ASK |$)", said)
        write = re.search(r"WRITE (\S+)", said)
        if write and since_user == 0:
            calls.append(self._call("write_file", path=write.group(1), content="planted\n"))
        elif steps and since_user + 1 < int(steps.group(1)):
            calls.append(self._call("list_dir", path="."))
        else:
            if report:
                calls.append(self._call("report", text=report.group(1)))
            if ask:
                calls.append(self._call("ask_orchestrator", question=ask.group(1)))
            else:
                summary = "seen: " + " | ".join(users(params.messages))
                calls.append(self._call("complete", summary=summary))
        return ModelCompleteResult(
            message=ChatMessage(
                role="assistant", content=f"turn {len(self.requests)}", tool_calls=calls
            ),
            usage=TURN_USAGE,
            stop_reason="tool_use",
        )


def _turns_since_user(messages: list[ChatMessage]) -> int:
    n = 0
    for m in reversed(messages):
        if m.role == "user":
            break
        if m.role == "assistant":
            n += 1
    return n
