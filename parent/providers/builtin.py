"""The built-in providers that run a tether child: `spawn`, `fork` and `command`, and the
registry every supervisor starts with (these three, `inprocess` and `acp`).

All three run a child that speaks tether's protocol through the supervisor's own path (the
one spawn seam, pool, zygote, the run's clocks and the ladder); they differ only in what
`prepare` does to the request:

- `spawn` (the default): a fresh child of the config's command (`python -I -m tether.child`
  unless the caller's `command=` says otherwise);
- `fork`: the same, seeded with the caller's completed-turn transcript. The caller is the run
  named by `fork_from=` (its completed turns as the parent's broker recorded them, system
  messages left out); in a delegation, the orchestrator whose `task` call started the
  sub-agent (the delegator hands its fork history). A transcript passed as `history=` is used
  when there is no `fork_from=`. A fork with no transcript at all is bad usage;
- `command`: any executable that speaks tether's protocol, named by the argument
  (`command:node child.js`, split like a shell would) or by `command=`; always a process (a
  config whose transport is `memory` runs it as one).
"""

from __future__ import annotations

import dataclasses
import os

from tether.parent.process.config import DEFAULT_COMMAND
from tether.parent.process.env import build_child_env
from tether.parent.process.spawn import missing_command
from tether.parent.run.provider import (
    Provider,
    ProviderRegistry,
    SubagentRequest,
    command_of,
)
from tether.parent.run.transport import MEMORY, PROCESS

SPAWN = "spawn"
FORK = "fork"
COMMAND = "command"
INPROCESS = "inprocess"
ACP = "acp"


class SpawnProvider(Provider):
    name = SPAWN
    summary = "a fresh tether child process (the default)"
    tether_runtime = True

    def problem(self, argument: str | None = None) -> str | None:
        if argument is not None:
            return f"{self.name} takes no argument (use command:ARGV for another executable)"
        return missing_command(DEFAULT_COMMAND, build_child_env(os.environ))

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        if request.argument is not None:
            raise ValueError(
                f"provider {self.name!r} takes no argument; to run another executable use "
                "'command:ARGV' or command="
            )
        return request


class ForkProvider(SpawnProvider):
    name = FORK
    summary = "a fresh tether child seeded with the caller's completed turns"
    from_caller_turns = True

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        request = super().prepare(request)
        history = request.caller_turns or request.history
        if not history:
            raise ValueError(
                "provider 'fork' starts from the caller's completed turns, and there are "
                "none: pass fork_from= (a run of this supervisor that has had a model turn) "
                "or history="
            )
        return request.replace(history=tuple(history))


class CommandProvider(Provider):
    name = COMMAND
    summary = "any executable that speaks tether's protocol (command:ARGV)"

    def problem(self, argument: str | None = None) -> str | None:
        if argument is None:
            return "needs the command to run: command:ARGV (or command= in Python)"
        try:
            command = command_of(argument, self.name)
        except ValueError as exc:
            return str(exc)
        assert command is not None
        return missing_command(command, build_child_env(os.environ))

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        command = command_of(request.argument, f"provider {self.name!r}")
        config = request.config
        if config.transport == MEMORY:
            config = dataclasses.replace(config, transport=PROCESS)  # an executable: a process
        if command is None:
            if not request.command_given:
                raise ValueError(
                    "provider 'command' needs the command to run: 'command:ARGV' or command="
                )
            return request.replace(config=config)
        if request.command_given:
            raise ValueError("give the command once: either 'command:ARGV' or command=")
        config = dataclasses.replace(config, command=tuple(command))
        return request.replace(config=config, command_given=True)


def builtin_providers() -> ProviderRegistry:
    """A registry of the built-in providers: spawn, fork, command, inprocess and acp (the ACP
    package and the child runtime are imported only when a run needs them)."""
    from tether.parent.providers.acp_provider import AcpProvider
    from tether.parent.providers.inprocess import InProcessProvider

    return ProviderRegistry(
        [SpawnProvider(), ForkProvider(), CommandProvider(), InProcessProvider(), AcpProvider()]
    )
