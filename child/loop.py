"""The built-in agent loop: model turn → tool calls → results → next turn.

A run ends when `complete` is called (`Finished` with its summary and artifacts), when a stop
condition holds (`"no_tool_calls"`: a turn that calls no tool ends the run with its text), when
`maxIterations` model turns have passed (`Failed(budget_exhausted)`), or when the parent
answers a model turn with an error (`Failed(agent_error)`). Cancellation is not handled here: the
runner's cancel scope interrupts whatever the loop awaits and reports the run as aborted.

A definition's `tokenBudget` ends the run the same way once the input + output tokens used so
far pass it: no further turn is started, and the run keeps its last text.

Compaction: before each turn, when the transcript's estimated size (characters / 4) passes the
definition's `compactionThreshold` (default `DEFAULT_COMPACTION_THRESHOLD`), everything but the
system message, the original task and the latest assistant turn (with its tool results) is
summarised through `model/complete` with `purpose: "compaction"` and the definition's
`compactionModel`, replaced by one message holding the summary, and a `compaction` event says
so. A failed compaction is logged and the run goes on uncompacted.

What compaction keeps: a tool result that came with a compact form (`ToolOutcome.compact`: a
parent tool's delivery, such as a task call's summary, status and artifact paths, sizes and
types, which the parent marks with `ToolCallResult.compact`) is not left to the summary, which
may drop a path: once its result is compacted, its compact form is kept verbatim in a message
of its own after the summary (`KEPT_PREFIX`, a line per result in the order they came, named
by tool and call id), and every later compaction keeps it again. So an orchestrator can still
find and re-read every file delivered to it, however often its transcript is compacted. The
child needs no knowledge of what a delivery is: the parent, which served the call, says. A
result passed in as `history` has no compact form and is summarised like any other.

Tools run through `AgentContext.call_tool`, which applies the mode (explore: mutating tools are
hard-denied; build: they are approved by the parent first).

Order of a turn's tool calls: one after another, in the order the model wrote them, except
that consecutive calls of tools that may overlap (`concurrent = True`: the parent's tools,
whose effects the parent decides and orders itself, such as delegation's `task`) run at the
same time, so independent delegations of one turn proceed in parallel. The child's own tools
never overlap (two edits of one file, a command reading what the previous call wrote). Their
`tool_call` events go out as the group starts; the results, their `tool_result` events and the
transcript keep the call order whatever order the calls finish in. A run's `complete` (or
question) ends it: calls after it are not run.
"""

from __future__ import annotations

import logging

import anyio
import msgspec

from tether.child.agent import AgentContext, AgentOutcome, Failed, Finished, NeedsInput
from tether.child.tools import Completion, ToolOutcome
from tether.protocol import ConnectionClosed, ProtocolError, RemoteError
from tether.protocol.messages import ChatMessage, ToolCall

log = logging.getLogger("tether.child")

NO_TOOL_CALLS = "no_tool_calls"
EVENT_PREVIEW_CHARS = 8000
"""Tool results are previewed, not copied, in events: the parent relays progress, not data."""
DEFAULT_COMPACTION_THRESHOLD = 60_000
CHARS_PER_TOKEN = 4
COMPACTION_INSTRUCTIONS = (
    "Summarise the conversation below for the agent that will continue it: what it was asked, "
    "what it has done and found (files, commands, results), and what is left. Be concise and "
    "keep every detail needed to finish the task."
)
SUMMARY_PREFIX = "Summary of the earlier part of this task (older turns were compacted):"
KEPT_PREFIX = (
    "Kept through compaction, verbatim: what earlier tool calls delivered (the files named "
    "here are in the workspace; read them again when you need their content):"
)
NUDGE = (
    "Continue with the task. When it is done, call the `complete` tool with a summary and "
    "the paths of anything you produced."
)


class AgentLoop:
    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self._task: ChatMessage | None = None
        self._deliveries: list[tuple[ChatMessage, str]] = []
        """Results still in the transcript that have a compact form, with it (a line each)."""
        self._kept: list[str] = []
        """Compact forms of results compacted away, in the order they came."""
        self._kept_message: ChatMessage | None = None
        """The message holding `_kept` in the transcript (remade at each compaction)."""

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        self.messages = self._opening(ctx)
        return await self._loop(ctx)

    async def resume(self, ctx: AgentContext, message: str) -> AgentOutcome:
        """Continue a finished run with the next user message, on the same transcript (the
        run's budgets apply to this activation anew)."""
        self.messages.append(ChatMessage(role="user", content=message))
        return await self._loop(ctx)

    async def _loop(self, ctx: AgentContext) -> AgentOutcome:
        definition = ctx.definition
        for iteration in range(1, definition.max_iterations + 1):
            spent = _over_budget(ctx)
            if spent is not None:
                return spent
            ctx.progress.iteration_count = iteration
            await ctx.emit("step", {"iteration": iteration})
            await self._compact_if_needed(ctx)
            try:
                turn = await ctx.complete_model(self.messages)
            except (RemoteError, ProtocolError, ConnectionClosed) as exc:
                # The parent refused the turn (no model, provider down), its reply did not fit
                # the protocol, or the transcript passed its byte cap: the run cannot go on.
                reason = exc.message if isinstance(exc, RemoteError | ProtocolError) else str(exc)
                return Failed(
                    kind="agent_error",
                    message=f"the model turn failed: {reason}",
                    summary=ctx.progress.last_text,
                )
            reply = ChatMessage(
                role="assistant", content=turn.message.content, tool_calls=turn.message.tool_calls
            )
            self.messages.append(reply)
            if reply.content:
                ctx.progress.last_text = reply.content
                await ctx.emit("text", {"text": reply.content})

            if not reply.tool_calls:
                if NO_TOOL_CALLS in definition.stop_conditions:
                    return Finished(
                        summary=reply.content,
                        message="the model answered without calling a tool (stop condition)",
                    )
                self.messages.append(ChatMessage(role="user", content=NUDGE))
                continue

            completion = await self._call_tools(ctx, reply.tool_calls)
            if isinstance(completion, str):
                return NeedsInput(question=completion, summary=ctx.progress.last_text)
            if completion is not None:
                return Finished(
                    summary=completion.summary,
                    message="the agent called complete",
                    artifacts=completion.artifacts,
                    skipped=completion.skipped,
                )
        spent = _over_budget(ctx)
        if spent is not None:
            return spent
        return Failed(
            kind="budget_exhausted",
            message=f"the run used its {definition.max_iterations} iterations without completing",
            summary=ctx.progress.last_text,
        )

    def _opening(self, ctx: AgentContext) -> list[ChatMessage]:
        opening: list[ChatMessage] = []
        if ctx.definition.instructions:
            opening.append(ChatMessage(role="system", content=ctx.definition.instructions))
        opening.extend(ctx.params.history)
        self._task = ChatMessage(role="user", content=ctx.params.prompt)
        opening.append(self._task)
        return opening

    async def _compact_if_needed(self, ctx: AgentContext) -> None:
        threshold = ctx.definition.compaction_threshold or DEFAULT_COMPACTION_THRESHOLD
        before = estimate_tokens(self.messages)
        if before <= threshold:
            return
        last_turn = max(
            (i for i, m in enumerate(self.messages) if m.role == "assistant"), default=None
        )
        if last_turn is None:
            return
        head = [m for m in self.messages[:last_turn] if m.role == "system" or m is self._task]
        old = [
            m
            for m in self.messages[:last_turn]
            if not (m.role == "system" or m is self._task or m is self._kept_message)
        ]
        if not old:
            return
        model = ctx.definition.compaction_model or ctx.definition.model
        request = [
            ChatMessage(role="system", content=COMPACTION_INSTRUCTIONS),
            ChatMessage(role="user", content=render_transcript(old)),
        ]
        try:
            result = await ctx.complete_model(request, tools=[], purpose="compaction", model=model)
        except (RemoteError, ProtocolError, ConnectionClosed) as exc:
            log.warning("run %s: compaction failed, going on without it: %s", ctx.run_id, exc)
            return
        summary = ChatMessage(role="user", content=f"{SUMMARY_PREFIX}\n{result.message.content}")
        # Identity, not call id: a model may reuse an id, and each result is its own delivery.
        leaving = {id(m) for m in old}
        self._kept.extend(line for m, line in self._deliveries if id(m) in leaving)
        self._deliveries = [(m, line) for m, line in self._deliveries if id(m) not in leaving]
        kept: list[ChatMessage] = []
        if self._kept:
            self._kept_message = ChatMessage(
                role="user", content="\n".join([KEPT_PREFIX, *self._kept])
            )
            kept.append(self._kept_message)
        self.messages = [*head, summary, *kept, *self.messages[last_turn:]]
        after = estimate_tokens(self.messages)
        await ctx.emit(
            "compaction",
            {
                "beforeTokens": before,
                "afterTokens": after,
                "summarizedMessages": len(old),
                "keptResults": len(self._kept),
                "model": model,
            },
        )

    async def _call_tools(
        self, ctx: AgentContext, calls: list[ToolCall]
    ) -> Completion | str | None:
        """Run a turn's calls (see the module docstring for the order); every call gets a
        result message, even failed ones. Returns what ends the run: a completion, a question
        for the orchestrator, or `None`."""
        completion: Completion | str | None = None
        for group in _overlapping_groups(ctx, calls):
            for call in group:
                await ctx.emit(
                    "tool_call", {"id": call.id, "name": call.name, "arguments": call.arguments}
                )
            if completion is not None:
                outcomes = [
                    ToolOutcome(content="not run: the task was already completed", is_error=True)
                ] * len(group)
            else:
                outcomes = await _run_group(ctx, group)
            for call, outcome in zip(group, outcomes, strict=True):
                if completion is None and outcome.completion is not None:
                    completion = outcome.completion
                elif completion is None and outcome.question is not None:
                    completion = outcome.question
                await ctx.emit(
                    "tool_result",
                    {
                        "id": call.id,
                        "name": call.name,
                        "isError": outcome.is_error,
                        "content": outcome.content[:EVENT_PREVIEW_CHARS],
                        "truncated": len(outcome.content) > EVENT_PREVIEW_CHARS,
                    },
                )
                content = f"error: {outcome.content}" if outcome.is_error else outcome.content
                message = ChatMessage(role="tool", content=content, tool_call_id=call.id)
                self.messages.append(message)
                if outcome.compact is not None:
                    line = f"[{call.name} {call.id}] {outcome.compact}"
                    self._deliveries.append((message, line))
        return completion


def _overlapping_groups(ctx: AgentContext, calls: list[ToolCall]) -> list[list[ToolCall]]:
    """The calls in order, runs of consecutive calls of overlapping tools grouped together;
    every other call is a group of its own."""
    groups: list[list[ToolCall]] = []
    previous_overlaps = False
    for call in calls:
        overlaps = bool(getattr(ctx.tools.get(call.name), "concurrent", False))
        if overlaps and previous_overlaps:
            groups[-1].append(call)
        else:
            groups.append([call])
        previous_overlaps = overlaps
    return groups


async def _run_group(ctx: AgentContext, group: list[ToolCall]) -> list[ToolOutcome]:
    """Run one group's calls at the same time; the outcomes in call order."""
    if len(group) == 1:
        call = group[0]
        return [await ctx.call_tool(call.name, call.arguments, call_id=call.id)]
    outcomes: list[ToolOutcome | None] = [None] * len(group)

    async def one(i: int, call: ToolCall) -> None:
        outcomes[i] = await ctx.call_tool(call.name, call.arguments, call_id=call.id)

    async with anyio.create_task_group() as tg:
        for i, call in enumerate(group):
            tg.start_soon(one, i, call)
    return [o for o in outcomes if o is not None]


def _over_budget(ctx: AgentContext) -> Failed | None:
    budget = ctx.definition.token_budget
    used = ctx.progress.input_tokens + ctx.progress.output_tokens
    if budget is None or used <= budget:
        return None
    return Failed(
        kind="budget_exhausted",
        message=f"the run used {used} tokens, past its token budget of {budget}",
        summary=ctx.progress.last_text,
    )


def estimate_tokens(messages: list[ChatMessage]) -> int:
    """A transcript's size in tokens, estimated as characters / 4 (tool calls included)."""
    chars = 0
    for m in messages:
        chars += len(m.content)
        for call in m.tool_calls:
            chars += len(call.name) + len(msgspec.json.encode(call.arguments))
    return chars // CHARS_PER_TOKEN


def render_transcript(messages: list[ChatMessage]) -> str:
    """Old turns as plain text for the compaction model."""
    lines: list[str] = []
    for m in messages:
        if m.content:
            lines.append(f"[{m.role}] {m.content}")
        for call in m.tool_calls:
            args = msgspec.json.encode(call.arguments).decode()
            lines.append(f"[{m.role} calls {call.name}] {args}")
    return "\n".join(lines)
