"""The `acp` provider: an Agent Client Protocol agent run as a supervised sub-agent.

Theory of operation
-------------------
The agent's command comes from the provider's argument (`acp:node agent.js`, split like a
shell would), from `command=`, or from the provider itself (`AcpProvider(name="claude",
command=[...])` registered under its own name, or a `[[provider]]` table of a definitions
file). For one run, `run()`:

1. takes the supervisor's model gateway (started on first use) and mints a capability token
   for this run (`Gateway.grant`), whose provider is the run's own broker (`BrokeredModel`):
   every model call the agent makes is a `model/complete` of this run as far as the parent is
   concerned — the run's resolved model answers, the definition's step and token budgets
   apply (reserved per call, counting the calls in flight), the parent counts the usage (and
   the delegation ledger and tree budget see it through the run's turn hook), and a call
   past a budget is refused with 402 and ends the run as `budget_exhausted`. The grant's
   quota bounds what the agent holds of the gateway: its requests are no larger than the
   run's `max_message_bytes`, its connections and held bytes are its own (`http.py`). The
   real key never leaves the parent: the agent's environment gets the token in
   `ANTHROPIC_API_KEY` / `OPENAI_API_KEY` and the gateway's URL in `ANTHROPIC_BASE_URL` /
   `OPENAI_BASE_URL` (explicit values: the scrub drops `*_KEY`).
2. spawns the agent through the one spawn path (`SubagentRun.spawn`, `wire="raw"`): scrubbed
   environment, limits, cgroup, the run's isolation level. Under the sandbox, with a root
   supervisor, the agent gets a private network namespace whose only listener is the
   gateway's socket, made inside it by the trampoline and passed back over a socketpair
   (`tether.contain.netns`); the parent's gateway serves that socket for this run's token
   alone (`listen_on(only=grant)`). Otherwise the run gets a loopback listener of its own
   (`listen_for(grant)`), served for its token alone; without root the sandbox keeps the
   host's network but lets the agent connect to that TCP port only (Landlock). A run with a
   network policy gets its egress proxy the same way, beside the gateway: a second listener
   in the namespace (or a loopback port of its own), and the proxy variables in its
   environment (`tether.parent.egress.seat`); `NO_PROXY` keeps the gateway's calls direct.
   Either way every connection the agent opens counts against its own grant from the
   accept, and the seccomp filter's gateway variant allows TCP sockets and no UNIX socket.
   A read-only
   (explore mode) run gets a read-only workspace from the sandbox, since the agent's own
   tools write files without asking the client. At the process level the agent gets a
   private HOME (a temporary directory, removed afterwards), so it neither reads nor writes
   the user's own configuration.
3. drives it with `AcpDriver` (handshake, prompt, permissions through the run's approval
   policy, files confined to the workspace, events, the wall and idle clocks, cancel by
   `session/cancel`), sharing the run's `Observed` record with the child.
4. leaves the child's context, which walks the ladder without a `shutdown` rung: close stdin
   (agents are not required to exit on EOF), SIGTERM + SIGCONT to the tree, SIGKILL, sweep.
   Then the token is revoked and the run's own socket closed (`Gateway.release`).

The agent's system prompt is its own: a definition's instructions are not sent (a foreign
agent has none of tether's tools); a fork's earlier turns go ahead of the task as a
transcript (`acp_mapping.render_prompt`).

Runs on the asyncio backend only; the ACP package (~0.8 s to import) is imported when a run
starts, never when the provider is registered.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from tether.parent.process.env import build_child_env
from tether.parent.process.isolation import probe_host
from tether.parent.process.launchers import Local, resolve_launcher
from tether.parent.process.private_network import (
    Channel,
    PrivateNetwork,
    open_channel,
    receive_listeners,
)
from tether.parent.process.spawn import missing_command
from tether.parent.run.provider import Provider, SubagentRequest, SubagentRun, command_of
from tether.protocol.messages import (
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolApproveParams,
    ToolApproveResult,
)

if TYPE_CHECKING:
    from tether.parent.egress.seat import RunEgress
    from tether.parent.gateway import Gateway
    from tether.parent.gateway.grants import Grant
    from tether.parent.process.config import ChildConfig
    from tether.parent.process.supervised import SupervisedProcess
    from tether.parent.providers.acp import AcpDriver
    from tether.parent.run.broker import Broker

AGENT_ENV: Mapping[str, str] = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
"""Set for every ACP agent unless the config sets it: agents built on Claude Code otherwise
also try to reach their vendor's services (telemetry, updates) besides the model."""


class BrokeredModel:
    """The gateway's provider for one run: each call is that run's `model/complete`,
    through its broker (model selection, budgets, the parent's count)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        result: ModelCompleteResult = await self.broker.on_request("model/complete", params)
        return result


class AcpProvider(Provider):
    name = "acp"
    summary = "an Agent Client Protocol agent (acp:COMMAND); its model calls go through the gateway"
    once_because = "tether does not keep an ACP agent's session after its prompt is answered"

    def __init__(
        self,
        name: str = "acp",
        command: Sequence[str] | None = None,
        *,
        summary: str | None = None,
        env: Mapping[str, str] | None = None,
        read_paths: Sequence[str] = (),
        handshake: float = 30.0,
        auth_method: str | None = None,
    ) -> None:
        """`command`: the agent's command line (`None`: each run names it, `acp:COMMAND`);
        `env`: more explicit variables for the agent; `read_paths`: more paths a sandboxed
        agent may read (its installation is found from the command); `handshake`: seconds
        for `initialize` + `session/new` (agents on Node take a while to start);
        `auth_method`: call ACP `authenticate` with this method when offered."""
        self.name = name
        self.command = tuple(command) if command is not None else None
        if summary is not None:
            self.summary = summary
        elif command is not None:
            self.summary = f"the ACP agent {' '.join(self.command or ())!r}"
        self.env = dict(env or {})
        self.read_paths = tuple(read_paths)
        self.handshake = handshake
        self.auth_method = auth_method

    # --- before the run -----------------------------------------------------------------------

    def _command(self, argument: str | None) -> list[str] | None:
        got = command_of(argument, f"provider {self.name!r}")
        if got is not None:
            return got
        return list(self.command) if self.command is not None else None

    def problem(self, argument: str | None = None) -> str | None:
        if importlib.util.find_spec("acp") is None:
            return "the agent-client-protocol package is not installed"
        try:
            command = self._command(argument)
        except ValueError as exc:
            return str(exc)
        if command is None:
            return (
                f"needs its agent's command: {self.name}:COMMAND (tether run --provider), a "
                "[[provider]] table in the definitions file, or AcpProvider(command=...)"
            )
        return missing_command(command, build_child_env(os.environ), "the ACP agent")

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        command = self._command(request.argument)
        if request.command_given:
            if request.argument is not None:
                raise ValueError("give the agent's command once: 'acp:COMMAND' or command=")
            command = list(request.config.command)
        if command is None:
            raise ValueError(
                f"provider {self.name!r} needs the ACP agent's command: '{self.name}:COMMAND' "
                "or command="
            )
        if not isinstance(resolve_launcher(request.config.launcher), Local):
            raise ValueError(f"provider {self.name!r} runs agents with the local launcher only")
        cfg = request.config
        env = {**AGENT_ENV, **self.env, **cfg.env}
        reads = [*cfg.read_paths, *self.read_paths, *package_roots(command)]
        cfg = dataclasses.replace(
            cfg, command=tuple(command), spawner="exec", env=env, read_paths=tuple(reads)
        )
        return request.replace(config=cfg)

    # --- the run ------------------------------------------------------------------------------

    async def run(self, run: SubagentRun) -> RunResult | None:
        gateway = await run.gateway()
        cfg = run.config
        # The run's own quota of the gateway: its requests are as large as its wire's.
        grant = gateway.grant(
            run.run_id, BrokeredModel(run.broker), max_request_bytes=cfg.max_message_bytes
        )
        reach: _Reach | None = None
        if run.broker.trace is not None:
            run.broker.trace.conceal(grant.token)  # the agent holds it: never in its trace
        home: str | None = None
        egress = run.egress
        try:
            level = run.isolation.level
            reach = await _reach(level, gateway, grant, egress)
            cfg, home = _agent_config(cfg, level, gateway, grant, reach, egress)
            read_only = run.request.agent.read_only
            async with run.spawn(
                cfg.command,
                config=cfg,
                network=reach.network,
                workspace_read_only=read_only and level == "sandbox",
            ) as child:
                channel = reach.channel
                if channel is not None:
                    channel.spawned()
                    got = await receive_listeners(channel.ours, len(channel.ports), self.handshake)
                    if got is None:
                        if not child.proc.exited():
                            run.observed.handshake = self.handshake
                        return None
                    await gateway.listen_on(got[0], only=grant)
                    if egress is not None:
                        await egress.serve(got[1])
                driver = self._driver(run, child, grant, cfg)
                run.on_cancel(lambda _reason: driver.cancel())
                try:
                    outcome = await driver.run()
                finally:
                    run.prompts = 1 if driver.prompted else 0
            return outcome.answer
        finally:
            with anyio.CancelScope(shield=True):
                await gateway.release(grant)
            if reach is not None and reach.channel is not None:
                reach.channel.close()
            if home is not None:
                shutil.rmtree(home, ignore_errors=True)

    def _driver(
        self, run: SubagentRun, child: SupervisedProcess, grant: Grant, cfg: ChildConfig
    ) -> AcpDriver:
        """The ACP conversation with the started agent, under the run's limits and policy."""
        from tether.parent.providers.acp import AcpDriver, AcpLimits, AcpTask

        async def approve(params: ToolApproveParams) -> ToolApproveResult:
            got: ToolApproveResult = await run.broker.on_request("tool/approve", params)
            return got

        limits = run.limits
        return AcpDriver(
            child.proc.stdin,
            child.proc.stdout,
            AcpTask(
                run.run_id,
                run.request.prompt,
                run.request.workspace,
                read_only=run.request.agent.read_only,
                history=run.request.history,
                auth_method=self.auth_method,
            ),
            approve=approve,
            on_event=run.publish,
            meter=grant,
            limits=AcpLimits(
                handshake=self.handshake,
                wall=limits.wall_seconds,
                idle=limits.idle_seconds,
                cancel_grace=cfg.cancel_grace,
                max_line_bytes=cfg.max_message_bytes,
            ),
            observed=run.observed,
        )


@dataclasses.dataclass(frozen=True)
class _Reach:
    """Where the agent reaches the gateway (`port`) and the run's proxy (`proxy_port`), and the
    private network that lets it (`channel`: listeners its sandbox makes in its namespace)."""

    port: int
    proxy_port: int | None = None
    network: PrivateNetwork | None = None
    channel: Channel | None = None


async def _reach(level: str, gateway: Gateway, grant: Grant, egress: RunEgress | None) -> _Reach:
    if level == "sandbox" and probe_host().root:
        # The gateway's listener (and the run's proxy's, with a network policy) made inside
        # the agent's private namespace, in this order.
        channel = open_channel(1 if egress is None else 2)
        try:
            return _Reach(
                channel.ports[0],
                channel.ports[1] if egress is not None else None,
                channel.network(),
                channel,
            )
        except BaseException:
            channel.close()
            raise
    # A listener of the run's own: its connections count against its grant from the accept,
    # and the sandbox allows the agent that one port (and its proxy's).
    _, port = await gateway.listen_for(grant)
    ports = [port]
    proxy_port = None
    if egress is not None:
        proxy_port = await egress.listen_loopback()
        ports.append(proxy_port)
    network = PrivateNetwork(tuple(ports)) if level == "sandbox" else None
    return _Reach(port, proxy_port, network)


def _agent_config(
    cfg: ChildConfig,
    level: str,
    gateway: Gateway,
    grant: Grant,
    reach: _Reach,
    egress: RunEgress | None,
) -> tuple[ChildConfig, str | None]:
    """The agent's config pointed at the gateway (and the proxy), and the home directory made
    for it outside a sandbox (`None`: none made; the caller removes it)."""
    env = {**cfg.env, **gateway.env_for(grant, f"http://127.0.0.1:{reach.port}")}
    reads = tuple(cfg.read_paths)
    if egress is not None and reach.proxy_port is not None:
        from tether.parent.egress.seat import LOOPBACK

        env.update(egress.child_env(reach.proxy_port, direct=LOOPBACK))
        reads += egress.read_paths
    home: str | None = None
    if level != "sandbox" and "HOME" not in cfg.env:
        home = tempfile.mkdtemp(prefix="tether-acp-home-")
        env.update(_home_env(home))
    return dataclasses.replace(cfg, env=env, read_paths=reads), home


def package_roots(command: Sequence[str]) -> list[str]:
    """The installation a command's script belongs to, for a sandboxed agent to read: for a
    path under `node_modules`, the directory holding the outermost `node_modules` (its
    dependencies sit beside it, not next to the script)."""
    roots: list[str] = []
    for arg in command:
        if not os.path.isabs(arg) or not os.path.exists(arg):
            continue
        parts = Path(arg).parts
        if "node_modules" in parts:
            root = Path(*parts[: parts.index("node_modules")])
            if str(root) != "/":
                roots.append(str(root))
    return roots


def _home_env(home: str) -> dict[str, str]:
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_STATE_HOME": f"{home}/.local/state",
    }
