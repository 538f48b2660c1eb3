"""`tether trace show`: a trace as a transcript for people, or as one JSON document for tools.

The transcript shows, per run: its header (what it was asked, by whom, on which model), then
each model call with the messages that are new since the call before (a call after compaction
shows its whole, shorter request again), the answer with its tool calls, usage and stop
reason; the child's reports of the tools it ran (marked as the child's); parent tools,
approvals, follow-up messages, results, and where tracing stopped. Long texts are cut unless
`full`. The text is the child's and the model's words: the caller cleans it for a terminal
(`tether.parent.run.terminal.clean`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import msgspec

from tether.parent.trace.format import (
    AgentBound,
    Approval,
    ChildReport,
    FollowUp,
    Outcome,
    ParentToolCall,
    Stopped,
    Turn,
)
from tether.parent.trace.reader import RecordedRun, Trace
from tether.protocol.messages import ChatMessage, RunResult

CUT = 800
"""Characters of one text shown unless `full`."""


def render(trace: Trace, linked: Sequence[Trace] = (), *, full: bool = False) -> str:
    out = [f"trace {trace.path}"]
    for run in trace.runs:
        out += _run(run, full)
    if linked:
        out += ["", "sub-agent runs (traces in the same directory naming a run above as parent):"]
        for sub in linked:
            for run in sub.runs:
                out.append(f"  {_summary_line(run)}")
                out.append(f"    {sub.path}")
    return "\n".join(_hang(entry) for entry in out)


def _hang(entry: str) -> str:
    """An entry's later lines indented under its first, so the next entry stands out."""
    if "\n" not in entry:
        return entry
    first, *rest = entry.split("\n")
    pad = " " * (len(first) - len(first.lstrip(" ")) + 4)
    return "\n".join([first, *(pad + line for line in rest)])


def as_json(trace: Trace, linked: Sequence[Trace] = ()) -> dict[str, Any]:
    """The whole trace as one document: each file with its runs, each run with its header and
    its lines (as written)."""

    def one(t: Trace) -> dict[str, Any]:
        return {
            "path": t.path,
            "runs": [
                {"header": msgspec.to_builtins(r.header), "lines": msgspec.to_builtins(r.lines)}
                for r in t.runs
            ],
        }

    return {**one(trace), "subagents": [one(t) for t in linked]}


def _run(run: RecordedRun, full: bool) -> list[str]:
    h = run.header
    started = dt.datetime.fromtimestamp(h.wall, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    out = [
        "",
        f"run {run.run_id}: {h.agent}"
        + (f", started by {h.parent_run_id}" if h.parent_run_id else "")
        + (f", agent {run.agent_id}" if run.agent_id else ""),
        f"  {started}; provider {h.provider}; model {h.model or '(none named)'}"
        + (f", compaction {h.compaction_model}" if h.compaction_model else "")
        + f"; tether {h.tether_version}, protocol {h.protocol_version}",
        f"  workspace {h.workspace}",
        f"  task: {_cut(h.prompt, full)}",
    ]
    if h.description:
        out.append(f"  description: {h.description}")
    if h.history:
        out.append(f"  history: {len(h.history)} message(s) before the task")
    if h.parent_tools:
        out.append(f"  parent tools: {', '.join(t.name for t in h.parent_tools)}")
    previous: Turn | None = None
    calls = tokens_in = tokens_out = 0
    for line in run.lines:
        if isinstance(line, Turn):
            out += _turn(line, previous, h.mono, full)
            previous = line if line.purpose == "turn" else previous
            calls += 1
            if line.response is not None:
                tokens_in += line.response.usage.input_tokens
                tokens_out += line.response.usage.output_tokens
        elif isinstance(line, ChildReport):
            out.append(_report(line, full))
        elif isinstance(line, ParentToolCall):
            out.append(_parent_tool(line, full))
        elif isinstance(line, Approval):
            verdict = "allowed" if line.allow else "denied"
            reason = f" ({line.reason})" if line.reason else ""
            out.append(f"  approval {line.tool}: {verdict}{reason}")
        elif isinstance(line, FollowUp):
            out.append(f"message (activation {line.activation}): {_cut(line.text, full)}")
        elif isinstance(line, Outcome):
            out += _result(line.activation, line.result, full)
        elif isinstance(line, AgentBound):
            out.append(f"  became continuable agent {line.agent_id}")
        elif isinstance(line, Stopped):
            out.append(f"tracing stopped at {line.bytes} bytes: {line.reason}")
    out.append(f"usage: {calls} model call(s), {tokens_in} in / {tokens_out} out")
    return out


def _turn(turn: Turn, previous: Turn | None, start: float, full: bool) -> list[str]:
    at = f"+{turn.mono - start:.3f}s, {turn.seconds * 1000:.1f} ms"
    what = "compaction" if turn.purpose == "compaction" else "turn"
    model = f"{turn.slot or '-'} {turn.model or '(unnamed)'}"
    head = f"{what} {turn.index} ({at}) {model}"
    if turn.response is not None:
        u = turn.response.usage
        head += f": {u.input_tokens} in / {u.output_tokens} out, {turn.response.stop_reason}"
    elif turn.error is not None:
        who = "refused by the parent" if turn.error.by == "parent" else "the model failed"
        head += f": {who}: {turn.error.message} ({turn.error.code})"
    out = [head]
    messages = turn.request.messages
    new = _new_messages(messages, previous) if turn.purpose == "turn" else None
    if new is None:
        out.append(f"  request: {len(messages)} message(s)")
        new = messages
    for m in new:
        out.append(f"  > {_message(m, full)}")
    if turn.response is not None:
        m = turn.response.message
        out.append(f"  < {m.role}: {_cut(m.content, full)}")
        for call in m.tool_calls:
            args = json.dumps(call.arguments, ensure_ascii=False)
            out.append(f"    calls {call.name} [{call.id}] {_cut(args, full)}")
    return out


def _new_messages(messages: list[ChatMessage], previous: Turn | None) -> list[ChatMessage] | None:
    """The messages new since `previous` (its answer left out), or `None` when this request
    does not continue it (the first call, or the transcript was compacted)."""
    if previous is None:
        return None
    before = previous.request.messages
    if len(messages) < len(before) or messages[: len(before)] != before:
        return None
    new = messages[len(before) :]
    answer = previous.response.message.content if previous.response is not None else None
    if new and (new[0].role, new[0].content) == ("assistant", answer):
        new = new[1:]
    return new


def _message(m: ChatMessage, full: bool) -> str:
    if m.role == "system" and not full:
        first = m.content.strip().splitlines()[0] if m.content.strip() else ""
        return f"system ({len(m.content)} characters): {_cut(first, False)}"
    who = f"tool [{m.tool_call_id}]" if m.role == "tool" else m.role
    text = f"{who}: {_cut(m.content, full)}"
    for call in m.tool_calls:
        text += f" (calls {call.name} [{call.id}])"
    return text


def _report(line: ChildReport, full: bool) -> str:
    data = line.data
    name, call = data.get("name", "?"), data.get("id", "?")
    if line.event == "tool_call":
        args = json.dumps(data.get("arguments", {}), ensure_ascii=False)
        return f"  child reports: runs {name} [{call}] {_cut(args, full)}"
    status = "error" if data.get("isError") else "ok"
    content = data.get("content", "")
    return f"  child reports: {name} [{call}] {status}: {_cut(str(content), full)}"


def _parent_tool(line: ParentToolCall, full: bool) -> str:
    args = json.dumps(line.arguments, ensure_ascii=False)
    head = f"  parent tool {line.name} [{line.call_id}] ({line.seconds:.2f}s) {_cut(args, full)}"
    if line.result is not None:
        status = "error" if line.result.is_error else "ok"
        return f"{head}\n    {status}: {_cut(line.result.content, full)}"
    if line.error is not None:
        return f"{head}\n    refused: {line.error.message}"
    return head


def _result(activation: int, r: RunResult, full: bool) -> list[str]:
    state = "completed" if r.success else f"{r.status} ({r.failure.kind if r.failure else '?'})"
    out = [
        f"result (activation {activation}): {state}: {_cut(r.summary or r.message, full)}",
        f"  {r.iteration_count} turn(s), {r.usage.input_tokens} in / {r.usage.output_tokens} out",
    ]
    out += [f"  artifact {a.path} ({a.fs_type}, {a.size} bytes)" for a in r.artifacts]
    out += [f"  skipped {s.path}: {s.reason}" for s in r.skipped]
    return out


def _summary_line(run: RecordedRun) -> str:
    r = run.result
    state = "no result" if r is None else ("completed" if r.success else r.status)
    tokens = "" if r is None else f", {r.usage.input_tokens} in / {r.usage.output_tokens} out"
    label = run.header.description or run.header.prompt
    return f"{run.run_id} {run.header.agent} {_cut(label, False, 60)!r}: {state}{tokens}"


def _cut(text: str, full: bool, limit: int = CUT) -> str:
    if full or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"
