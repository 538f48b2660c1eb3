"""The one planning step: a `RunSpec` and this host in, a `RunPlan` out — or `ValueError`.

Theory of operation
-------------------
`plan(spec, ctx)` is where every bad request is found, before anything is spawned, for every
way a run starts (see `spec.py`). It does, in order:

1. the provider: `spec.provider` (a name of the supervisor's registry, `NAME:ARGUMENT`, or a
   `Provider`), `command` when a command is given, else `spawn`;
2. the agent: a role name, a definition, or a custom agent (`module:callable`,
   `file.py:callable`), which runs in tether's own runtime only;
3. the workspace (an existing directory, made absolute) and the child config (the caller's or
   the supervisor's, with the command);
4. the provider's `prepare` (its argument, a fork's transcript — the caller's completed turns
   as the parent's broker recorded them), the transport that will obtain the child (the
   config's `transport`: a local process or tether's runtime in memory, which refuses what it
   cannot carry), the containment tier, the launcher, the spawner, and the isolation level the
   transport and the provider give (a sandbox needs a workspace it can protect, and must be
   able to keep the child out of every path the config denies); a network policy
   (`check_network`: a child process under the local launcher, started by exec, every
   credential set in the parent's environment and found nowhere in the child's);
5. the models, resolved in the parent (`broker.resolve_models`: the caller's model wins over
   the definition's; model strings from the wire are never resolved);
6. the request as the child will read it (`agent/run` parameters; too large for one message is
   bad usage), whether the provider can keep a run for follow-ups, whether the agent needs a
   model it has none of, and the idle limit against tether's heartbeats (a warning);
7. the trace: the spec's `trace=`, else the supervisor's, checked to lie outside the workspace
   (`trace/spec.py`).

Nothing here changes state: it reads the host's facts (probed once per process), the files a
request names, and model scripts (off the event loop). `check_agent` and `check_config` are the
parts a placement on another node shares (`RayPlacement` plans the rest on the node).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tether.contain.plan import DEFAULT_SANDBOX_ID
from tether.parent.process import layers
from tether.parent.process.config import ChildConfig
from tether.parent.process.host import Host, host
from tether.parent.process.isolation import (
    Choice,
    deny_problem,
    probe_host,
    probe_host_off_loop,
    sandbox_uid,
    unreadable_problem,
    workspace_problem,
)
from tether.parent.process.launchers import Launcher, resolve_launcher
from tether.parent.process.limits import Limits
from tether.parent.process.spawn import check_spawner, child_env
from tether.parent.roles.builtins import resolve_agent
from tether.parent.run.broker import ApprovePolicy, ParentTool, RunModels, TurnHook, resolve_models
from tether.parent.run.budget import Budget
from tether.parent.run.checks import check_model, warn_idle
from tether.parent.run.events import EventCallback
from tether.parent.run.provider import (
    Provider,
    ProviderBody,
    ProviderRegistry,
    RunBody,
    SubagentRequest,
)
from tether.parent.run.spec import Continuation, NamedModel, RunSpec
from tether.parent.run.transport import (
    PROCESS,
    ChildTransport,
    builtin_transports,
    transport_named,
)
from tether.parent.trace.spec import TraceOption, TraceSpec, check_trace
from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES, encode_request
from tether.protocol.messages import (
    APPLY_POLICIES,
    WORKSPACE_MODES,
    AgentDefinition,
    AgentRunParams,
    ApplyPolicy,
)
from tether.protocol.methods import AGENT_RUN

_run_ids = itertools.count(1)


@dataclass(frozen=True)
class PlanContext:
    """What a plan depends on besides the spec: the supervisor's providers, default config,
    transports, default trace and kept layers."""

    providers: ProviderRegistry
    config: ChildConfig
    transports: Mapping[str, ChildTransport] = field(default_factory=builtin_transports)
    trace: TraceOption = None
    layers: Mapping[str, layers.Layer] = field(default_factory=dict)
    """The supervisor's kept layers, by directory (`RunSpec.layer` names one)."""
    ahead: Callable[[ChildConfig], None] | None = None
    """Told the config of a run whose child is a local process started by its spawner, once
    its launcher and spawner are checked and before its isolation is chosen (which may probe
    the host): the supervisor may start what that spawn will need (its zygote) meanwhile."""


@dataclass(frozen=True)
class RunPlan:
    """Everything a run handle needs, decided before the spawn."""

    spec: RunSpec
    run_id: str
    params: AgentRunParams
    config: ChildConfig
    limits: Limits
    tier: Host
    isolation: Choice
    models: RunModels
    provider: str
    """The name of the provider that carries the run."""
    body: RunBody | None
    """A provider's own way of running it (`None`: a tether child of `config`)."""
    transport: ChildTransport
    """How the run obtains its tether child (`config.transport`; unused with a `body`)."""
    continuation: Continuation | None = None
    approve: ApprovePolicy | None = None
    on_event: EventCallback | None = None
    parent_tools: Sequence[ParentTool] = ()
    on_turn: TurnHook | None = None
    budgets: Sequence[Budget] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    trace: TraceSpec | None = None
    """Where the run is traced (its directory checked: outside the workspace)."""
    parent_run: str | None = None
    agent: str = ""
    """The agent as the caller named it: a role, a custom agent's `module:callable` (file
    paths absolute), or the definition's type."""
    layer: layers.LayerPlan | None = None
    """A layered run's layer, to be made before the spawn (`None`: shared, or `kept`)."""
    kept: layers.Layer | None = None
    """The kept layer the run continues in (`RunSpec.layer`)."""
    apply: ApplyPolicy = "never"
    layer_read_only: bool = False
    """The child sees its layer read-only (a read-only agent in a kept layer)."""

    @property
    def layered(self) -> bool:
        return self.layer is not None or self.kept is not None


def check_agent(spec: RunSpec) -> tuple[AgentDefinition, str | None]:
    """The run's wire definition, and the `module:callable` of a custom agent (else `None`);
    raises `ValueError` for an unknown role or a bad agent spec."""
    agent = spec.agent
    if isinstance(agent, str) and ":" in agent:
        impl = custom_agent(agent, spec.command)
        return AgentDefinition(type="custom", description=f"custom agent {impl}"), impl
    return resolve_agent(agent), None


def check_config(spec: RunSpec, default: ChildConfig, impl: str | None) -> ChildConfig:
    """The child config of the run: the caller's or the default, with the caller's command and
    a custom agent's `--agent` argument."""
    cfg = spec.config or default
    if spec.command is not None:
        if not spec.command:
            raise ValueError("command must not be empty")
        cfg = dataclasses.replace(cfg, command=tuple(spec.command))
    if impl is not None:
        cfg = dataclasses.replace(cfg, command=(*cfg.command, "--agent", impl))
    return cfg


def custom_agent(spec: str, command: Sequence[str] | None) -> str:
    """Check a `module:callable` or `path.py:callable` agent spec; file paths become absolute
    because the child runs isolated (`-I`) and resolves nothing against our working directory."""
    if command is not None:
        raise ValueError("a custom agent runs in tether's own child; it cannot take a command")
    target, _, attr = spec.rpartition(":")
    if not target or not attr.isidentifier():
        raise ValueError(f"agent {spec!r}: expected module:callable or path/to/file.py:callable")
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise ValueError(f"agent {spec!r}: no such file {str(path)!r}")
        return f"{path}:{attr}"
    if not all(part.isidentifier() for part in target.split(".")):
        raise ValueError(f"agent {spec!r}: {target!r} is not a module name")
    return spec


def check_request_size(params: AgentRunParams) -> None:
    size = len(encode_request(0, AGENT_RUN.name, params)) - 1
    if size > DEFAULT_MAX_MESSAGE_BYTES:
        raise ValueError(
            f"the run's request is {size} bytes, more than a child reads in one message "
            f"({DEFAULT_MAX_MESSAGE_BYTES}); put large inputs in the workspace instead"
        )


def new_run_id() -> str:
    return f"run-{os.getpid()}-{next(_run_ids)}"


async def plan(spec: RunSpec, ctx: PlanContext) -> RunPlan:
    """The plan of one run (see the module docstring); raises `ValueError` for bad usage."""
    name = spec.provider
    if name is None:
        name = "command" if spec.command is not None else "spawn"
    chosen, argument = ctx.providers.select(name)
    mode, policy, kept = check_layering(spec, ctx)
    definition, impl = check_agent(spec)
    if impl is not None and chosen.drives_itself and chosen.isolated:
        raise ValueError(
            f"a custom agent runs in tether's own runtime; provider {chosen.name!r} "
            "runs something else (use spawn, fork or inprocess)"
        )
    ws = Path(spec.workspace).resolve()
    if not ws.is_dir():
        raise ValueError(f"workspace {str(spec.workspace)!r} is not a directory")
    cfg = check_config(spec, ctx.config, impl)
    request = _prepared(spec, chosen, argument, definition, str(ws), cfg)
    cfg = request.config
    # A provider that drives its own agent starts any process it needs itself, locally.
    transport = transport_named(ctx.transports, PROCESS if chosen.drives_itself else cfg.transport)
    transport.check(cfg)
    tier = host(cfg.containment)
    launcher = resolve_launcher(cfg.launcher)  # an unknown launcher is bad usage
    check_spawner(cfg)
    remote = launcher.name if launcher.provides.eof_teardown_only else None
    if (
        ctx.ahead is not None
        and transport.name == PROCESS
        and not chosen.drives_itself
        and cfg.network_policy.none  # a run with a network policy is started by exec
    ):
        ctx.ahead(cfg)
    if transport.name == PROCESS and remote is None and cfg.isolation != "process":
        await probe_host_off_loop()  # the isolation below may need it: not on the event loop
    choice = chosen.isolation(transport.isolation(cfg, remote), cfg)
    if not cfg.network_policy.none:
        cfg = check_network(cfg, chosen, launcher, transport)
        request = request.replace(config=cfg)
        if choice.level != "sandbox":
            choice = dataclasses.replace(choice, warning=_joined(choice.warning, UNENFORCED))
    if choice.level == "sandbox":
        _check_sandbox(cfg, str(ws), launcher)
    layer_plan, read_only_layer = None, False
    if mode == "layered":
        # An overlay is mounted in a sandboxed child process's own mount namespace; anything
        # else (a child in memory, a provider that drives its own child) works in a copy.
        overlay_ok = (
            choice.level == "sandbox"
            and launcher.name == "local"
            and not chosen.drives_itself
            and transport.name == PROCESS
        )
        if overlay_ok:
            await layers.support_off_loop()  # the first time, an overlay is tried
        layer_plan, read_only_layer, request = _layer(
            spec, request, str(ws), kept, remote=remote, overlay_ok=overlay_ok
        )
    models = await _models(spec, request)
    params = _params(spec, request)
    _check_usage(spec, ctx, chosen, request, models)
    limits = spec.limits or Limits()
    warn_idle(cfg.command, limits)
    trace = check_trace(spec.trace if spec.trace is not None else ctx.trace, str(ws))
    return RunPlan(
        spec=spec,
        run_id=request.run_id,
        params=params,
        config=cfg,
        limits=limits,
        tier=tier,
        isolation=choice,
        models=models,
        provider=chosen.name,
        body=ProviderBody(chosen, request) if chosen.drives_itself else None,
        transport=transport,
        continuation=spec.continuation,
        approve=spec.approve,
        on_event=spec.on_event,
        parent_tools=spec.parent_tools,
        on_turn=spec.on_turn,
        budgets=spec.budgets,
        labels=spec.labels,
        trace=trace,
        parent_run=spec.parent_run,
        agent=impl or (spec.agent if isinstance(spec.agent, str) else definition.type),
        layer=layer_plan,
        kept=kept,
        apply=policy,
        layer_read_only=read_only_layer,
    )


def _prepared(
    spec: RunSpec,
    chosen: Provider,
    argument: str | None,
    definition: AgentDefinition,
    workspace: str,
    cfg: ChildConfig,
) -> SubagentRequest:
    """The run as its provider prepared it (its argument read, a fork's transcript)."""
    fork = spec.fork_from
    return chosen.prepare(
        SubagentRequest(
            run_id=spec.run_id or new_run_id(),
            prompt=spec.prompt,
            agent=definition,
            workspace=workspace,
            config=cfg,
            history=tuple(spec.history),
            description=spec.description,
            argument=argument,
            caller_turns=tuple(fork.broker.completed_turns()) if fork is not None else (),
            parent_tools=tuple(t.spec for t in spec.parent_tools),
            command_given=spec.command is not None,
        )
    )


def _check_sandbox(cfg: ChildConfig, workspace: str, launcher: Launcher) -> None:
    """A sandbox needs a workspace it can protect, and must be able to keep the child out of
    every path the config denies and let it read what it runs."""
    protects = probe_host().root and launcher.name == "local"
    problem = (
        workspace_problem(workspace, protects_code=protects)
        or deny_problem(
            cfg.deny_paths,
            command=cfg.command,
            workspace=workspace,
            read_paths=cfg.read_paths,
            can_cover=protects,
        )
        or unreadable_problem(
            cfg.command, cfg.read_paths, as_uid=sandbox_uid(cfg.sandbox_user, launcher)
        )
    )
    if problem is not None:
        raise ValueError(problem)


def _layer(
    spec: RunSpec,
    request: SubagentRequest,
    workspace: str,
    kept: layers.Layer | None,
    *,
    remote: str | None,
    overlay_ok: bool,
) -> tuple[layers.LayerPlan | None, bool, SubagentRequest]:
    """A layered run's layer (a new one's plan, or the kept one it continues in), whether the
    child sees it read-only, and the request with the workspace the child sees."""
    if remote is not None:
        raise ValueError(
            f"a layered workspace is made on this host; the {remote!r} launcher runs the "
            "child elsewhere: use workspace_mode='shared' there"
        )
    cfg = request.config
    layer_plan = None
    read_only_layer = False
    if kept is None:
        owner = None
        if probe_host().root:
            owner = cfg.sandbox_user or (DEFAULT_SANDBOX_ID, DEFAULT_SANDBOX_ID)
        layer_plan = layers.choose(
            workspace,
            spec.run_id or request.run_id,
            overlay_ok=overlay_ok,
            owner=owner,
            directory=cfg.layers_dir,
        )
        child_ws = layer_plan.child_workspace
    else:
        if kept.plan.overlay and not overlay_ok:
            raise ValueError(
                f"the layer {kept.root} is an overlay, which only a sandboxed child that "
                "this host starts itself can mount (not this provider or launcher)"
            )
        child_ws = kept.plan.child_workspace
        read_only_layer = request.agent.read_only
    if child_ws != request.workspace:
        request = request.replace(workspace=child_ws)
    return layer_plan, read_only_layer, request


async def _models(spec: RunSpec, request: SubagentRequest) -> RunModels:
    """The run's models, resolved in the parent (the caller's model wins over the
    definition's)."""
    model = spec.model
    return await resolve_models(
        model.provider if isinstance(model, NamedModel) else model,
        request.agent,
        name=model.name if isinstance(model, NamedModel) else None,
    )


def _params(spec: RunSpec, request: SubagentRequest) -> AgentRunParams:
    """The request as the child will read it (`agent/run`); too large for one message is bad
    usage."""
    params = AgentRunParams(
        run_id=request.run_id,
        prompt=request.prompt,
        agent=request.agent,
        description=request.description,
        workspace=request.workspace,
        history=list(request.history),
        parent_tools=list(request.parent_tools),
        continuable=spec.continuation is not None,
    )
    check_request_size(params)
    return params


def _check_usage(
    spec: RunSpec,
    ctx: PlanContext,
    chosen: Provider,
    request: SubagentRequest,
    models: RunModels,
) -> None:
    """A continuable run needs a provider that keeps runs; an agent, the model it needs."""
    if spec.continuation is not None and chosen.drives_itself:
        raise ValueError(
            f"{once(chosen)}; only a tether child keeps a run for follow-ups: use "
            f"{follow_up_providers(ctx.providers)}"
        )
    if not chosen.drives_itself or not chosen.isolated:
        # A provider that drives its own agent may need no model of ours.
        check_model(request.config.command, request.agent, models.main is not None)


UNENFORCED = (
    "the network policy is not enforced at this isolation level: the child is sent through "
    "the run's egress proxy, and nothing keeps it from the host's network"
)


def _joined(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second


def check_network(
    cfg: ChildConfig, provider: Provider, launcher: Launcher, transport: ChildTransport
) -> ChildConfig:
    """The config of a run whose network policy allows anything, or `ValueError`: its egress
    proxy needs a child process of this host (a listener is passed into its sandbox), the
    child is started by exec (the zygote cannot hand it that listener), and every credential
    is set in the parent's environment and reaches the child by no variable."""
    from tether.parent.egress.seat import read_secrets

    if not provider.isolated or transport.name != PROCESS:
        raise ValueError(
            f"a network policy needs a child process: provider {provider.name!r} runs in the "
            "parent's own process"
        )
    if launcher.name != "local":
        raise ValueError(
            f"a network policy needs the local launcher, not {launcher.name!r}: the run's "
            "egress proxy is handed into the child's sandbox on this host"
        )
    if cfg.spawner == "zygote":
        raise ValueError(
            "a run with a network policy is started by exec (spawner='exec' or 'auto'): the "
            "zygote cannot hand its child the proxy's listener"
        )
    if cfg.spawner == "auto":
        cfg = dataclasses.replace(cfg, spawner="exec")
    secrets = read_secrets(cfg.network_policy)
    if secrets:
        import importlib.util

        if importlib.util.find_spec("cryptography") is None:
            raise ValueError(
                "a network credential needs the cryptography package (the run's certificate "
                "authority): pip install cryptography"
            )
        env = child_env(cfg)
        for name, value in secrets.items():
            for key, seen in env.items():
                if value in seen or key == name:
                    raise ValueError(
                        f"the network credential ${name} would reach the child's environment "
                        f"({key}): a credential stays in the parent, so leave it out of the "
                        "child's pass_env and env"
                    )
    return cfg


def check_layering(spec: RunSpec, ctx: PlanContext) -> tuple[str, ApplyPolicy, layers.Layer | None]:
    """The run's workspace mode, apply policy and the kept layer it continues in; raises
    `ValueError` for bad usage."""
    mode = spec.workspace_mode
    if mode not in WORKSPACE_MODES:
        raise ValueError(f"workspace_mode {mode!r}: expected one of {', '.join(WORKSPACE_MODES)}")
    policy = spec.apply
    if policy not in APPLY_POLICIES:
        raise ValueError(f"apply {policy!r}: expected one of {', '.join(APPLY_POLICIES)}")
    if policy == "on_verified":
        raise ValueError(
            "apply='on_verified' needs a verifier: a delegation's (orchestrate, tether mcp, "
            "a Delegator); a single run knows never and on_success (with attempts, choose= "
            "can run your own check)"
        )
    if spec.attempts != 1:
        raise ValueError("attempts are Supervisor.run's: start() runs one attempt")
    kept = None
    if spec.layer is not None:
        kept = ctx.layers.get(spec.layer)
        if kept is None or kept.discarded:
            raise ValueError(
                f"no kept layer {spec.layer!r} in this supervisor (applied or discarded, or "
                "another supervisor's)"
            )
        mode = "layered"
    if policy != "never" and mode != "layered":
        raise ValueError(f"apply={policy!r} is for a layered run (workspace_mode='layered')")
    return mode, policy, kept  # type: ignore[return-value]


def once(provider: Provider) -> str:
    """Why a run of `provider` cannot be continued, as a clause ("provider 'acp' runs its
    agent once: ...")."""
    return f"provider {provider.name!r} runs its agent once: {provider.once_because}"


def follow_up_providers(providers: ProviderRegistry) -> str:
    """The providers of `providers` whose runs can be continued, by name: those that run a
    tether child (every one that does not drive its own run: `spawn`, `fork`, `command`,
    `inprocess`, and a registered one that only prepares the request)."""
    names = [p.name for p in providers if not p.drives_itself]
    listed = ", ".join(names) if names else "none here"
    if "command" in names:
        listed += " (a command's child must announce agentMessage)"
    return listed


def provider_for(providers: ProviderRegistry, spec: RunSpec) -> Provider:
    """The provider a spec names (for callers that must know it before planning)."""
    name = spec.provider
    if name is None:
        name = "command" if spec.command is not None else "spawn"
    return providers.select(name)[0]
