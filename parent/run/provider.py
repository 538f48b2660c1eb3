"""Providers: the named ways a supervisor runs a sub-agent, and what each of them is handed.

Theory of operation
-------------------
A *provider* is one way to run a sub-agent: a fresh tether child (`spawn`), one seeded with the
caller's transcript (`fork`), any executable speaking tether's protocol (`command`), tether's
own agent loop served inside the parent (`inprocess`), an Agent Client Protocol agent (`acp`),
or one a user writes. Every supervisor has a `ProviderRegistry` (`sup.providers`) holding the
built-in ones; they coexist, and a run picks one by name: `sup.run(..., provider="acp")`, a
definition's `provider`, or the task tool's `agentType`. A name may carry an argument after a
colon, `NAME:ARGUMENT` (`acp:node agent.js`, `command:./child`), which the provider reads.

One interface for all of them. `Supervisor.start` turns the call into a `SubagentRequest`
(prompt, wire definition, workspace, history, child config, the caller's completed turns, the
argument), checks usage (bad usage raises `ValueError` before anything is spawned), and asks
the provider three things:

- `problem(argument)`: why it cannot run here (`None`: it can); `tether doctor` shows it too;
- `prepare(request)`: the request adjusted before the spawn: the command a `command` child
  runs, the transcript a `fork` starts from — or a `ValueError` for bad usage;
- `run(run)`, only if the provider overrides it: run the sub-agent its own way, given a
  `SubagentRun` (below), and return the agent's answer as a `RunResult` (or `None` when there
  is none; `run.observed` then says why). A provider that does not override `run` runs a
  tether child of its prepared request: the supervisor's own path (pool, zygote, the
  protocol's clocks and ladder).

Whatever the provider returns, the supervisor has the last word, exactly as for a tether
child (`results.build_result`): run id, containment tier and isolation level, usage and step
count as the parent's broker counted them, artifacts looked up again under the workspace, a
failure classified from what was observed. A provider never raises for what its agent did; an
exception from a provider's own code ends the run as `agent_error` (and is logged).

A `SubagentRun` gives a provider the run's powers without the supervisor's internals: the
request; the run's `Broker` (`complete()` a model turn through the parent's provider, counted
and held to the run's budgets; `approve()` through the run's policy); `emit()` progress
events; the isolation level and containment tier chosen for the run; `spawn()`, which starts a
process through the one spawn path every child takes (`process.spawn.spawn_child`: scrubbed
environment, limits, cgroup, sandbox, keeper registration, the dispose ladder when the context
ends) and shares the run's `Observed` with it; `gateway()`, the supervisor's model gateway for
a foreign agent's own model client; `egress`, the run's egress proxy when its network policy
allows anything; and `cancel_requested`, set when the caller cancels.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import shlex
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from tether.parent.process.classify import Observed
from tether.parent.process.config import ChildConfig
from tether.parent.process.isolation import Choice
from tether.parent.process.launchers import launcher_name, resolve_launcher
from tether.parent.process.private_network import PrivateNetwork
from tether.parent.process.proc import SpawnError
from tether.parent.run.events import ChildEvent, Event, RunStarted
from tether.parent.run.transport.base import ChildRequest
from tether.parent.run.transport.local import missing_program, spawned
from tether.protocol.messages import (
    AgentDefinition,
    AgentRunParams,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolApproveParams,
    ToolApproveResult,
    ToolSpec,
)

if TYPE_CHECKING:
    from tether.parent.egress.seat import RunEgress
    from tether.parent.gateway import Gateway
    from tether.parent.process.host import Host
    from tether.parent.process.limits import Limits
    from tether.parent.process.supervised import SupervisedProcess
    from tether.parent.run.broker import Broker

log = logging.getLogger("tether.parent")

NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
"""A provider's name: what definitions, `--provider` and the task tool's `agentType` say."""


def split_spec(spec: str) -> tuple[str, str | None]:
    """`"acp:node agent.js"` → `("acp", "node agent.js")`; `"spawn"` → `("spawn", None)`."""
    name, sep, argument = spec.partition(":")
    return name.strip(), (argument.strip() if sep else None)


@dataclass(frozen=True)
class SubagentRequest:
    """One sub-agent run as a provider sees it before anything is spawned."""

    run_id: str
    prompt: str
    agent: AgentDefinition
    """The wire definition: mode, system text, step and token budgets."""
    workspace: str
    """The resolved workspace directory."""
    config: ChildConfig
    """How the child is started and taken down (command, environment, isolation, ...)."""
    history: tuple[ChatMessage, ...] = ()
    """A transcript the run starts from (a fork's turns, or the caller's `history=`)."""
    description: str = ""
    argument: str | None = None
    """What followed the provider's name after a colon (`acp:COMMAND`)."""
    caller_turns: tuple[ChatMessage, ...] = ()
    """The completed turns of the run named by `fork_from=` (system messages left out), as
    the parent's broker recorded them."""
    parent_tools: tuple[ToolSpec, ...] = ()
    command_given: bool = False
    """The caller passed `command=` (the config's command is theirs, not the default)."""

    def replace(self, **changes: Any) -> SubagentRequest:
        return dataclasses.replace(self, **changes)


class Provider:
    """A way to run a sub-agent; subclass it, name it, and register an instance on a
    supervisor (`sup.providers.register(MyProvider())`). See the module docstring."""

    name: str = ""
    summary: str = ""
    """One line for `tether doctor`, the docs, and the task tool's `agentType`."""
    isolated: bool = True
    """Runs out of the parent's process (so a model may pick it per task call)."""
    tether_runtime: bool = False
    """Runs tether's own child runtime (spawn, fork, inprocess): it hosts custom agents
    (`module:callable`), and its built-in loop needs a model."""
    from_caller_turns: bool = False
    """Starts from the caller's completed turns (`fork`): offered as a task call's `agentType`
    only to a caller whose transcript the parent holds (an orchestrator, not an MCP client)."""
    once_because: str = (
        "it drives its agent its own way (it overrides Provider.run), and tether has no way "
        "to send that agent a follow-up"
    )
    """Why a provider that drives its own run cannot keep it for follow-ups (said in the
    error when a continuable run is asked of it, and to a model whose follow-up is refused)."""

    def problem(self, argument: str | None = None) -> str | None:
        """Why this provider cannot run here with `argument` (`None`: it can)."""
        return None

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        """The request adjusted before the spawn; raise `ValueError` for bad usage."""
        return request

    def isolation(self, chosen: Choice, config: ChildConfig) -> Choice:
        """The isolation level this provider's run gets, given what the supervisor chose for
        `config`; raise `ValueError` for a level it cannot give."""
        return chosen

    async def run(self, run: SubagentRun) -> RunResult | None:
        """Run the sub-agent your own way (override it); not overridden: a tether child of
        the prepared request."""
        raise NotImplementedError

    @property
    def drives_itself(self) -> bool:
        """Whether this provider overrides `run`."""
        return type(self).run is not Provider.run

    def __repr__(self) -> str:
        return f"<provider {self.name}>"


class ProviderRegistry:
    """The providers of one supervisor, by name; they coexist."""

    def __init__(self, providers: Sequence[Provider] = ()) -> None:
        self._by_name: dict[str, Provider] = {}
        for provider in providers:
            self.register(provider)

    def register(self, provider: Provider, *, replace: bool = False) -> Provider:
        """Add `provider` under its name; raises `ValueError` for a bad or taken name (unless
        `replace`)."""
        name = provider.name
        if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
            raise ValueError(
                f"provider name {name!r}: expected lower-case letters, digits, '-' or '_', "
                "starting with a letter (at most 64 characters)"
            )
        if name in self._by_name and not replace:
            raise ValueError(f"a provider named {name!r} is already registered")
        self._by_name[name] = provider
        return provider

    def unregister(self, name: str) -> None:
        self._by_name.pop(name, None)

    def get(self, name: str) -> Provider:
        """The provider named `name`; raises `ValueError` (bad usage) naming the known ones."""
        provider = self._by_name.get(name)
        if provider is None:
            raise ValueError(f"no provider named {name!r}; this supervisor has: {self.listing()}")
        return provider

    def select(self, spec: str | Provider) -> tuple[Provider, str | None]:
        """The provider and argument `spec` names (`NAME` or `NAME:ARGUMENT`, or a provider
        object, used as it is)."""
        if isinstance(spec, Provider):
            return spec, None
        name, argument = split_spec(spec)
        return self.get(name), argument

    def names(self) -> list[str]:
        return list(self._by_name)

    def listing(self) -> str:
        return ", ".join(self._by_name) or "none"

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Provider]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)

    def report(self) -> list[dict[str, Any]]:
        """Each provider with whether it can run here (`tether doctor`)."""
        out = []
        for provider in self:
            try:
                why = provider.problem(None)
            except Exception as exc:  # a user's provider must not break the report
                why = f"its check failed: {type(exc).__name__}: {exc}"
            out.append(
                {"name": provider.name, "summary": provider.summary, "ready": why is None}
                | ({"why": why} if why is not None else {})
            )
        return out


def command_of(argument: str | None, what: str) -> list[str] | None:
    """A command line from a provider argument (`shlex` words), or `None` without one."""
    if argument is None:
        return None
    words = shlex.split(argument)
    if not words:
        raise ValueError(f"{what}: the command after the colon is empty")
    return words


# --- what a provider that drives its own run is handed ---------------------------------------


class RunSeat(Protocol):
    """What a provider's run may use of the run that carries it (a `RunHandle` is one)."""

    run_id: str
    pid: int | None
    isolation: Choice
    host: Host

    @property
    def egress(self) -> RunEgress | None: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def params(self) -> AgentRunParams: ...

    def publish(self, event: Event) -> None: ...

    async def gateway(self) -> Gateway: ...

    def register(self, child: SupervisedProcess) -> None: ...

    def unregister(self, child: SupervisedProcess) -> None: ...


class RunBody(Protocol):
    """A provider's way to obtain and drive a run's child, in place of a tether child."""

    prompts: int
    """User turns sent to the agent (the result's `turnCount`)."""

    async def drive(self, seat: RunSeat, observed: Observed) -> RunResult | None:
        """Run the child to its answer (`None`: no answer, `observed` says why), filling
        `observed` as things happen; never raises for what the child did."""
        ...

    async def cancel(self, reason: str) -> None:
        """Ask the agent to stop; the handle cuts the run if it has not ended within the
        config's cancel grace."""
        ...


class SubagentRun:
    """The run a provider's `run()` carries out; see the module docstring."""

    def __init__(
        self, handle: RunSeat, request: SubagentRequest, observed: Observed, provider: Provider
    ) -> None:
        self._handle = handle
        self.request = request
        self.observed = observed
        """What went wrong, when there is no answer: shared with every child `spawn()` starts
        (exit status, signal, dispose rung, stderr tail) and classified by the supervisor."""
        self.provider = provider
        self.cancel_requested = anyio.Event()
        self.cancel_reason = ""
        self.prompts = 0
        """User turns the provider sent its agent (the result's `turnCount`)."""
        self._on_cancel: list[Callable[[str], None]] = []
        self._seq = 0

    # --- the run ----------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.request.run_id

    @property
    def broker(self) -> Broker:
        """The run's broker: the models the parent resolved for it, its approval policy, and
        what the parent counted (the result's usage and step count)."""
        return self._handle.broker

    @property
    def isolation(self) -> Choice:
        return self._handle.isolation

    @property
    def containment(self) -> Host:
        return self._handle.host

    @property
    def limits(self) -> Limits:
        return self._handle.limits

    @property
    def config(self) -> ChildConfig:
        return self.request.config

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelCompleteResult:
        """One model turn through the run's broker: the run's model, its budgets, counted by
        the parent. Raises `tether.protocol.WireError` when it is refused."""
        params = ModelCompleteParams(run_id=self.run_id, messages=list(messages), tools=list(tools))
        result: ModelCompleteResult = await self.broker.on_request("model/complete", params)
        return result

    async def approve(self, tool: str, arguments: Mapping[str, Any]) -> ToolApproveResult:
        """Ask the run's approval policy about one tool call."""
        params = ToolApproveParams(run_id=self.run_id, tool=tool, arguments=dict(arguments))
        result: ToolApproveResult = await self.broker.on_request("tool/approve", params)
        return result

    @property
    def params(self) -> AgentRunParams:
        """The `agent/run` parameters a tether runtime would get for this run."""
        return self._handle.params

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        """A progress event of this run (`step`, `text`, `tool_call`, ...)."""
        self._seq += 1
        self.publish(ChildEvent(self.run_id, self._seq, kind, data))

    def publish(self, event: Event) -> None:
        """Hand an event of this run to its callback and the supervisor's subscribers."""
        self._handle.publish(event)

    # --- cancellation -------------------------------------------------------------------------

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Call `callback(reason)` when the caller cancels the run (at once if it has)."""
        if self.cancel_requested.is_set():
            callback(self.cancel_reason)
        else:
            self._on_cancel.append(callback)

    def request_cancel(self, reason: str) -> None:
        if self.cancel_requested.is_set():
            return
        self.cancel_reason = reason
        self.cancel_requested.set()
        for callback in self._on_cancel:
            try:
                callback(reason)
            except Exception:
                log.exception("run %s: a cancel callback failed", self.run_id)

    # --- processes and the gateway ----------------------------------------------------------

    async def gateway(self) -> Gateway:
        """The supervisor's model gateway (started on first use, closed with the
        supervisor)."""
        return await self._handle.gateway()

    @property
    def egress(self) -> RunEgress | None:
        """The run's egress proxy when its network policy is not `none`: the provider puts
        the child where it reaches it (`serve` a listener of the child's namespace, or
        `listen_loopback`) and gives it `child_env(port)` and `read_paths`."""
        return self._handle.egress

    @asynccontextmanager
    async def spawn(
        self,
        command: Sequence[str],
        *,
        config: ChildConfig | None = None,
        wire: Literal["raw", "tether"] = "raw",
        network: PrivateNetwork | None = None,
        workspace_read_only: bool = False,
    ) -> AsyncIterator[SupervisedProcess]:
        """Start `command` through the one spawn path, at the run's isolation level, with the
        run's limits and containment tier, registered with the keeper; leaving the context
        walks the dispose ladder. Raises `SpawnError` when it cannot start (recorded in
        `observed`). `config`: the child config (default: the request's), whose command is
        replaced by `command`."""
        cfg = dataclasses.replace(config or self.request.config, command=tuple(command))
        level = self.isolation.level
        if level == "none":
            raise SpawnError("a run without process isolation cannot spawn a process")
        launcher = resolve_launcher(cfg.launcher)
        missing = missing_program(cfg, launcher)
        if missing is not None:
            self.observed.spawn_error = missing
            raise SpawnError(missing)
        handle = self._handle
        request = ChildRequest(
            cfg,
            handle.limits,
            handle.host,
            self.run_id.rsplit("-", 1)[-1],
            self.request.workspace,
            level,
        )
        spawned_child: SupervisedProcess | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    child = await stack.enter_async_context(
                        spawned(
                            request,
                            handle,
                            launcher=launcher,
                            wire=wire,
                            network=network,
                            workspace_read_only=workspace_read_only,
                        )
                    )
                except SpawnError as exc:
                    self.observed.spawn_error = str(exc)
                    raise
                spawned_child = child
                self.observed.limits = handle.limits
                child.observed = self.observed
                handle.pid = child.pid
                handle.publish(
                    RunStarted(
                        self.run_id, child.pid, tuple(cfg.command), launcher_name(cfg.launcher)
                    )
                )
                yield child
        finally:
            # Read once the child is gone: its stderr is drained by then.
            failed = spawned_child.spawn_failure() if spawned_child is not None else None
            if failed:
                self.observed.spawn_error = f"cannot start {cfg.command[0]!r}: {failed}"


class ProviderBody:
    """The `RunBody` of a provider that drives its own run: it hands the provider a
    `SubagentRun` and turns whatever comes back (or goes wrong) into the run's answer."""

    def __init__(self, provider: Provider, request: SubagentRequest) -> None:
        self.provider = provider
        self.request = request
        self.prompts = 0
        self._run: SubagentRun | None = None
        self._cancel_reason: str | None = None

    async def drive(self, handle: RunSeat, observed: Observed) -> RunResult | None:
        run = SubagentRun(handle, self.request, observed, self.provider)
        self._run = run
        if self._cancel_reason is not None:
            run.request_cancel(self._cancel_reason)
        answer: RunResult | None = None
        try:
            answer = await self.provider.run(run)
        except SpawnError:
            observed.spawn_error = observed.spawn_error or "the provider could not start its agent"
        except Exception as exc:
            log.error("run %s: provider %r failed", handle.run_id, self.provider.name, exc_info=exc)
            observed.agent_error = (
                f"the {self.provider.name!r} provider failed: {type(exc).__name__}: {exc}"[:500]
            )
        finally:
            self.prompts = run.prompts or (1 if answer is not None else 0)
        if answer is not None:
            observed.answered = True
        return answer

    async def cancel(self, reason: str) -> None:
        if self._run is None:
            self._cancel_reason = reason
        else:
            self._run.request_cancel(reason)
