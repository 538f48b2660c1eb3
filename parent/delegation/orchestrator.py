"""The orchestrator: a top-level agent whose model delegates through the `task` tool.

Theory of operation
-------------------
`orchestrate(sup, prompt, model=...)` (or `Supervisor.orchestrate`) runs the orchestrator as a
supervised tether child like any other run: the built-in loop, the orchestrator system prompt
(`ORCHESTRATOR_SYSTEM_PROMPT`), explore mode unless `read_only=False`, its own limits. Its one
extra is a *parent tool*, `task`, built from the definitions (`TaskTool`): the child offers it
to its model, and each call comes back to this parent as a `tool/call` request, which a
`Delegator` serves with a `SupervisorRunner`. So every sub-agent is a child of this supervisor,
a sibling of the orchestrator; the tree stays flat, the orchestrator's own tools stay inside its
child, and no sub-agent can delegate (it is offered no parent tool, and the broker refuses one
it was not offered). Several `task` calls of one model turn overlap (the child runs consecutive
parent-tool calls at once), so independent sub-agents run in parallel, under the delegator's
admission control.

What a task call gets:
- fork context: the orchestrator's completed turns as its broker recorded them
  (`Broker.completed_turns`: the parent's own record, never the child's word), cut before any
  unanswered call (`fork_history`) and with the orchestrator's `task` exchanges rewritten as
  text (`without_tools`), since a sub-agent has no `task` tool;
- the result: `TaskOutput` as JSON, written to the ledger before it is handed back, with its
  compact form beside it (`TaskOutput.tool_result`), which the orchestrator's child keeps
  verbatim when it compacts its transcript (`child/loop.py`), so what was delivered is never
  left to a summary.

Usage: the ledger holds one record per sub-agent run and the orchestrator's own usage, both as
the parent's brokers counted them. The tree's token budget counts the orchestrator's tokens as
well as every sub-agent's: once spent, new task calls are refused, every live sub-agent ends as
`budget_exhausted` (its result reaches the ledger and the orchestrator's model as `truncated`),
and the orchestrator's next model turn is refused, which ends it as `budget_exhausted` too.

Events: the orchestrator's own run events and the delegator's `subagent.*` events (tagged with
the orchestrator's run id) go to `on_event` and to the supervisor's subscribers; the sub-agents'
own runs are on the supervisor's stream as plain runs.

Cancellation: cancelling `orchestrate` disposes of the orchestrator's child; the task calls it
was waiting for are cancelled with it, and each disposes of its sub-agent before the
cancellation goes on. Stopping its run (`cancel()`, `abort()`; Ctrl-C in `tether orchestrate`)
stops the whole tree: every sub-agent run is on the orchestrator's stop line, so from the
instant the stop is asked no broker of the tree serves a model turn, every sub-agent is cut
(warm continuable ones too: their sessions stay), none starts any more, and the orchestrator's
result carries the receipt of the whole tree (`RunResult.stop`, `tether.parent.run.stop`).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from tether.parent.agents.service import DEFAULT_KEEP_ALIVE, agents_of
from tether.parent.agents.tools import SEND_MESSAGE_SPEC, list_agents_tool
from tether.parent.delegation.delegator import DEFAULT_MAX_CONCURRENT, Delegator
from tether.parent.delegation.history import fork_history, without_tools
from tether.parent.delegation.ledger import Ledger, LedgerTotals
from tether.parent.delegation.output import TaskOutput
from tether.parent.delegation.runner import ProviderRunner, SupervisorRunner
from tether.parent.delegation.verification import VerifierPolicy
from tether.parent.models import ModelProvider
from tether.parent.process.limits import Limits
from tether.parent.roles.builtins import builtin_registry
from tether.parent.roles.definitions import Registry, SubagentDefinition
from tether.parent.roles.prompts import (
    BUILD_MODE_NOTE,
    EXPLORE_MODE_NOTE,
    ORCHESTRATOR_SYSTEM_PROMPT,
)
from tether.parent.run.broker import ParentTool
from tether.parent.run.events import EventCallback
from tether.parent.run.spec import Chooser, NamedModel, RunSpec
from tether.parent.run.subagent_events import SubagentEvent, SubagentStatus
from tether.parent.trace.spec import TraceOption, trace_spec
from tether.protocol.messages import (
    AgentDefinition,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolCallParams,
    ToolCallResult,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from tether.parent.process.config import ChildConfig
    from tether.parent.run.core import SupervisorCore
    from tether.parent.run.handle import RunHandle

DEFAULT_ORCHESTRATOR_STEPS = 40
ORCHESTRATOR_TYPE = "orchestrator"


@dataclass(frozen=True)
class TaskCall:
    """One task call the orchestrator's model made, and what it got back."""

    tool_call_id: str
    arguments: Any
    output: TaskOutput


@dataclass(frozen=True)
class Running:
    """An orchestration under way: what `orchestrate(on_start=...)` is handed once the
    orchestrator's child is started, for live queries."""

    handle: RunHandle
    """The orchestrator's run (`cancel()`, `broker.brokered` for its tokens so far)."""
    delegator: Delegator

    def status(self) -> list[SubagentStatus]:
        """Every queued or running sub-agent: state, queue position, elapsed time, step, last
        tool, tokens so far."""
        return self.delegator.status()

    def limits(self) -> dict[str, Any]:
        """The cap, how many run and wait, the tree budget and what is spent of it."""
        return self.delegator.limits()


@dataclass
class Orchestration:
    """What an orchestrated run gives back: the orchestrator's own result, every task call with
    its output, and the usage ledger (a record per sub-agent run, the orchestrator's usage,
    totals)."""

    result: RunResult
    ledger: Ledger
    tasks: list[TaskCall] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.result.success

    def totals(self) -> LedgerTotals:
        return self.ledger.totals()

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (`tether orchestrate --json`)."""
        return {
            "result": msgspec.to_builtins(self.result),
            "tasks": [
                {
                    "toolCallId": t.tool_call_id,
                    "arguments": t.arguments,
                    "output": t.output.to_dict(),
                }
                for t in self.tasks
            ],
            "ledger": {
                "subagents": msgspec.to_builtins(self.ledger.records),
                "orchestrator": msgspec.to_builtins(self.ledger.orchestrator),
                "totals": msgspec.to_builtins(self.ledger.totals()),
            },
        }


def orchestrator_definition(
    *,
    read_only: bool = True,
    max_steps: int = DEFAULT_ORCHESTRATOR_STEPS,
    compaction_threshold: int | None = None,
    compaction_model: str | None = None,
) -> AgentDefinition:
    """The orchestrator's wire definition: its system prompt and mode note, and when its
    transcript is compacted (`None`: the child's default threshold, its own model); no model
    (the caller's `model` is the run's)."""
    note = EXPLORE_MODE_NOTE if read_only else BUILD_MODE_NOTE
    return AgentDefinition(
        type=ORCHESTRATOR_TYPE,
        description="The top-level agent: solves the task, delegating through the task tool.",
        max_iterations=max_steps,
        instructions=f"{ORCHESTRATOR_SYSTEM_PROMPT.strip()}\n{note.strip()}",
        read_only=read_only,
        compaction_threshold=compaction_threshold,
        compaction_model=compaction_model,
    )


async def orchestrate(
    sup: SupervisorCore,
    prompt: str,
    *,
    model: str | ModelProvider | NamedModel,
    definitions: Registry | Iterable[SubagentDefinition] | None = None,
    workspace: str | os.PathLike[str] = ".",
    limits: Limits | None = None,
    subagent_limits: Limits | None = None,
    config: ChildConfig | None = None,
    subagent_config: ChildConfig | None = None,
    read_only: bool = True,
    max_steps: int = DEFAULT_ORCHESTRATOR_STEPS,
    max_concurrent: int = DEFAULT_MAX_CONCURRENT,
    token_budget: int | None = None,
    verifier: VerifierPolicy | None = None,
    ledger: Ledger | str | os.PathLike[str] | None = None,
    models: Mapping[str, ModelProvider] | None = None,
    providers: Mapping[str, ProviderRunner] | None = None,
    agent_types: Iterable[str] | None = None,
    description: str = "",
    on_event: EventCallback | None = None,
    on_start: Callable[[Running], None] | None = None,
    continuable: bool = False,
    keep_alive: float | str = DEFAULT_KEEP_ALIVE,
    trace: TraceOption = None,
    compaction_threshold: int | None = None,
    compaction_model: str | None = None,
    workspace_mode: str = "shared",
    apply: str = "on_success",
    choose: Chooser | None = None,
) -> Orchestration:
    """Run an orchestrator on `prompt` with the task tool over `definitions` (default: the
    built-in roles; an empty set gives it no task tool) and return an `Orchestration`.

    `model`: the orchestrator's, and every sub-agent's whose definition names none. `limits` /
    `config`: the orchestrator's child; `subagent_limits` / `subagent_config`: each sub-agent's
    (default: the same). `max_concurrent`, `token_budget`, `verifier`: admission control and the
    verifier policy (`Delegator`). `ledger`: a `Ledger`, or a path for its JSON Lines file.
    `models`: provider objects by the name a definition's `model` gives; `providers`: runners
    by the name a definition's `provider` gives, tried before the supervisor's own providers
    (`sup.providers`). `agent_types`: the provider names the model may pick per call with the
    task tool's `agentType` (default: every provider of the supervisor that runs out of
    process and can run here; `inprocess` only if named). `on_start(running)`, if
    given, is called once the orchestrator's child is started, with a `Running` for live
    queries (`status()`, `limits()`) and the orchestrator's `RunHandle`.

    `continuable`: every `spawn` or `fork` sub-agent the task tool starts is a continuable
    agent (a durable session in the supervisor's state directory, a fork's starting with the
    turns it was forked from; its child kept alive for `keep_alive` after each answer), the
    task result's `subagentId` is its agent id, and the orchestrator's model also gets
    `send_message` and `list_agents`, over the agents of this orchestration only (its run id
    is their `parent_run`). They outlive the orchestration until their keep-alive passes or
    the supervisor closes; `sup.send_message` continues them. A sub-agent of a provider that
    drives its own agent runs once, and a follow-up to it is refused with the reason.

    `compaction_threshold` / `compaction_model`: when the orchestrator's transcript is
    compacted (estimated tokens; default the child's, 60 000) and by which model (default its
    own). Each task result keeps its compact form through compaction (`TaskOutput.compact`:
    summary, status, artifact paths, sizes and types), so every delivered file stays findable.

    `workspace_mode`: how build sub-agents see the workspace unless their definition says
    (`workspaceMode`): `shared` (in it, one at a time) or `layered` (each in a copy-on-write
    layer of its own, side by side; its change set applied as `apply` says: `on_success`,
    `on_verified` — after the verifier's PASS, every change verified — or `never`, returned in
    the task's output only). A task call may ask for `attempts`; `choose(results)` picks the
    one taken (default: the first to pass its verifier, else the first to finish).
    `trace`: trace the orchestrator and every sub-agent (a directory or a `TraceSpec`; default:
    the supervisor's `trace=`). Each sub-agent's trace names the orchestrator's run as its
    parent; the orchestrator's header holds what `tether replay` needs to start it again.

    Raises `ValueError` for bad usage before anything is spawned; never for what a child did.
    """
    registry = _registry_of(definitions)
    book = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
    orchestration_id = f"orch-{os.getpid()}-{secrets.token_hex(4)}"
    traced = trace_spec(trace) or getattr(sup, "trace", None)
    runner = SupervisorRunner(
        sup,
        default_model=model,
        models=models,
        workspace=workspace,
        limits=subagent_limits if subagent_limits is not None else limits,
        config=subagent_config if subagent_config is not None else config,
        providers=providers,
        keep_alive=keep_alive if continuable else None,
        parent_run=orchestration_id,
        trace=traced,
    )
    # Resolved once: the orchestrator and every sub-agent without a model of its own share it,
    # with its string (what a continuable sub-agent stores for a cold resume, what is billed).
    provider: NamedModel | ModelProvider = (
        NamedModel(model, await runner.resolve(model)) if isinstance(model, str) else model
    )
    runner.default_model = provider
    tree = _Tree(sup, book, on_event)
    offered = _offered(sup, runner, agent_types)
    delegator = Delegator(
        registry,
        runner,
        workspace=workspace,
        max_concurrent=max_concurrent,
        token_budget=token_budget,
        verifier=verifier,
        ledger=book,
        on_event=tree.publish,
        agent_types=offered,
        continuable=continuable,
        workspace_mode=workspace_mode,
        apply=apply,
        choose=choose,
    )
    if traced is not None:
        traced = traced.replace(
            orchestration=_replayable(
                registry,
                read_only=read_only,
                max_steps=max_steps,
                max_concurrent=max_concurrent,
                token_budget=token_budget,
                verifier=verifier,
                continuable=continuable,
                agent_types=list(offered),
            )
        )
    pool = delegator.budget.pool
    run = RunSpec(
        prompt=prompt,
        agent=orchestrator_definition(
            read_only=read_only,
            max_steps=max_steps,
            compaction_threshold=compaction_threshold,
            compaction_model=compaction_model,
        ),
        workspace=workspace,
        model=provider,
        limits=limits,
        description=description,
        config=config,
        parent_tools=tree.parent_tools(delegator, continuable, orchestration_id),
        on_event=on_event,
        on_turn=tree.on_turn,
        run_id=orchestration_id,
        # Its own turns count against the tree too: once spent, its next turn is refused.
        budgets=(pool,) if pool is not None else (),
        trace=traced,
    )
    if continuable:
        # It reaches the store through its tools: its workspace is apart from the store, and
        # its sandbox is denied the store's paths, as every agent's is.
        run = agents_of(sup).guard(run)
    result = await tree.run(run, runner, delegator, on_start)
    return Orchestration(result=result, ledger=book, tasks=tree.tasks)


def _registry_of(definitions: Registry | Iterable[SubagentDefinition] | None) -> Registry:
    if definitions is None:
        return builtin_registry()
    return definitions if isinstance(definitions, Registry) else Registry(definitions)


def _offered(
    sup: SupervisorCore, runner: SupervisorRunner, agent_types: Iterable[str] | None
) -> dict[str, str]:
    """The provider names the model may pick per task call, with what each is."""
    if agent_types is None:
        return runner.agent_types()
    # An unknown name is bad usage (`get` raises `ValueError`).
    return {name: sup.providers.get(name).summary or name for name in agent_types}


class _Tree:
    """The orchestrator's side of one orchestration: its run once started, the parent tools it
    serves (each task call made, in completion order) and the orchestrator's usage the ledger
    has been told of."""

    def __init__(self, sup: SupervisorCore, book: Ledger, on_event: EventCallback | None) -> None:
        self._sup = sup
        self._book = book
        self._on_event = on_event
        self.handle: RunHandle | None = None
        self.tasks: list[TaskCall] = []
        self._calls = 0
        self._counted = Usage()
        self._delegator: Delegator | None = None
        self._mine: set[str] = set()

    def publish(self, event: SubagentEvent) -> None:
        handle = self.handle
        tagged = dataclasses.replace(event, parent_run_id=handle.run_id if handle else "")
        self._sup.publish(tagged, self._on_event)

    def parent_tools(
        self, delegator: Delegator, continuable: bool, orchestration_id: str
    ) -> list[ParentTool]:
        """The orchestrator's parent tools: `task`, and for continuable sub-agents
        `send_message` and `list_agents`."""
        self._delegator = delegator
        tools = []
        if delegator.tool is not None:
            spec = ToolSpec(
                name=delegator.tool.name,
                description=delegator.tool.description,
                input_schema=delegator.tool.input_schema,
            )
            tools.append(ParentTool(spec, self._serve_task))
        if continuable:
            # A follow-up is a delegated run: through the delegator's gate, like a task call.
            tools.append(delegator.message_tool(SEND_MESSAGE_SPEC))
            tools.append(list_agents_tool(agents_of(self._sup), parent_run=orchestration_id))
        self._mine = {tool.spec.name for tool in tools}
        return tools

    async def _serve_task(self, params: ToolCallParams) -> ToolCallResult:
        assert self.handle is not None and self._delegator is not None
        self._calls += 1
        call_id = params.call_id or f"task-{self._calls}"
        # A sub-agent has none of the orchestrator's parent tools (task, send_message,
        # list_agents): their exchanges reach a forked one as text.
        history = without_tools(fork_history(self.handle.broker.completed_turns()), self._mine)
        output = await self._delegator.execute(
            params.arguments, tool_call_id=call_id, history=history
        )
        self.tasks.append(TaskCall(call_id, params.arguments, output))
        return output.tool_result()

    async def on_turn(self, params: ModelCompleteParams, result: ModelCompleteResult) -> None:
        if self.handle is None:
            return
        now = self.handle.broker.brokered.usage
        _add_usage(self._book, self._counted, now)
        self._counted = now

    async def run(
        self,
        run: RunSpec,
        runner: SupervisorRunner,
        delegator: Delegator,
        on_start: Callable[[Running], None] | None,
    ) -> RunResult:
        """Start the orchestrator and wait for its result (a cancelled caller's orchestrator
        is taken down first)."""
        handle = await self._sup.start(run)
        self.handle = handle
        runner.stops = handle.stops  # a stop of the orchestrator takes every sub-agent down
        if on_start is not None:
            on_start(Running(handle, delegator))
        try:
            result = await handle.result()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                handle.abort()
                await handle.wait()
            raise
        # What the broker counted past the last turn (compaction calls): the ledger's figure
        # for the orchestrator is the broker's, exactly.
        _add_usage(self._book, self._counted, result.usage)
        return result


def _replayable(
    registry: Registry,
    *,
    read_only: bool,
    max_steps: int,
    max_concurrent: int,
    token_budget: int | None,
    verifier: VerifierPolicy | None,
    continuable: bool,
    agent_types: list[str],
) -> dict[str, Any]:
    """How an orchestration was started, for its trace's header (`tether replay` reads it)."""
    policy = verifier or VerifierPolicy()
    return {
        "definitions": msgspec.to_builtins(list(registry)),
        "readOnly": read_only,
        "maxSteps": max_steps,
        "maxConcurrent": max_concurrent,
        "tokenBudget": token_budget,
        "verifier": {
            "minFiles": policy.min_files,
            "maxFixCycles": policy.max_fix_cycles,
            "enabled": policy.enabled,
            "definition": None if policy.verifier is None else msgspec.to_builtins(policy.verifier),
        },
        "continuable": continuable,
        "agentTypes": agent_types,
    }


def _add_usage(book: Ledger, before: Usage, now: Usage) -> None:
    increment = Usage(
        input_tokens=now.input_tokens - before.input_tokens,
        output_tokens=now.output_tokens - before.output_tokens,
    )
    if increment.input_tokens > 0 or increment.output_tokens > 0:
        book.add_orchestrator_usage(increment)
