"""The `process` transport: each child a local process, started the way every child process is.

`LocalProcess.open()` takes a ready child from the supervisor's warm pool when the run fits it
(the local launcher, the pool's settings, no layer and no private network), else spawns one
through `spawned()`:
the one spawn path (`process.spawn.spawn_child`: scrubbed environment, cgroup and limits, the
trampoline or the zygote's fork, the sandbox), the child registered with the keeper while it
lives, and its context — reader, stderr drain, exit watch, and on leaving the dispose ladder —
entered for the run. A provider that drives a foreign agent spawns its process through
`spawned()` too (`SubagentRun.spawn`, `wire="raw"`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal, overload

import anyio

from tether.parent.process.config import ChildConfig, pool_key
from tether.parent.process.isolation import Choice, choose_level
from tether.parent.process.launchers import Launcher, Local, resolve_launcher
from tether.parent.process.private_network import PrivateNetwork
from tether.parent.process.proc import SpawnError
from tether.parent.process.spawn import (
    AutoSpawner,
    Spawner,
    child_env,
    missing_command,
    spawn_child,
    spawner_name,
)
from tether.parent.process.supervised import SupervisedChild, SupervisedProcess
from tether.parent.run.transport.base import (
    ChildRequest,
    ObtainedChild,
    ProcessHost,
    Registrar,
)


class LocalProcess:
    """The `process` transport (see the module docstring)."""

    name = "process"

    def check(self, config: ChildConfig) -> None:
        return None  # the plan's own checks (launcher, spawner, isolation) are this one's

    def isolation(self, config: ChildConfig, remote_launcher: str | None) -> Choice:
        return choose_level(config.isolation, remote_launcher=remote_launcher)

    @asynccontextmanager
    async def open(self, request: ChildRequest, host: ProcessHost) -> AsyncIterator[ObtainedChild]:
        cfg = request.config
        launcher = resolve_launcher(cfg.launcher)
        env = child_env(cfg)
        missing = missing_program(cfg, launcher, env)
        if missing is not None:
            raise SpawnError(missing)
        pool = host.pool
        if (
            pool is not None
            and isinstance(launcher, Local)
            and request.layer is None
            and request.network is None
        ):
            key = pool_key(cfg, request.limits, request.tier, request.level, request.workspace)
            pooled = pool.acquire(key, env)
            if pooled is not None:
                # The pool's task owns this child's context (and so its dispose); the run
                # drives it, through every activation of a continuable run, and hands it back.
                child = pooled.child
                child.observed.limits = request.limits
                try:
                    yield ObtainedChild(
                        child, child.pid, child.pid, tuple(cfg.command), spawner_name(child.proc)
                    )
                finally:
                    with anyio.CancelScope(shield=True):
                        await pooled.finish()
                return
        spawner = await host.spawner(cfg)
        async with spawned(
            request,
            host,
            launcher=launcher,
            spawner=spawner,
            network=request.network,
            workspace_read_only=request.workspace_read_only,
            env=env,
        ) as child:
            yield ObtainedChild(
                child,
                child.pid,
                child.pid,
                tuple(cfg.command),
                spawner_name(child.proc),
                spawner.fallback if isinstance(spawner, AutoSpawner) else None,
            )


def missing_program(
    cfg: ChildConfig, launcher: Launcher, env: dict[str, str] | None = None
) -> str | None:
    """Why the launcher's program or the child's command cannot be started (`None`: both can);
    a launcher that runs the command elsewhere is not asked about the command here."""
    env = child_env(cfg) if env is None else env
    if launcher.program is not None:
        missing = missing_command([launcher.program], env, "the launcher")
        if missing is not None:
            return missing
    if launcher.provides.eof_teardown_only:
        return None
    return missing_command(cfg.command, env)


@overload
def spawned(
    request: ChildRequest,
    registrar: Registrar,
    *,
    launcher: Launcher | None = None,
    spawner: Spawner | None = None,
    wire: Literal["tether"] = "tether",
    network: PrivateNetwork | None = None,
    workspace_read_only: bool = False,
    env: dict[str, str] | None = None,
) -> AbstractAsyncContextManager[SupervisedChild]: ...


@overload
def spawned(
    request: ChildRequest,
    registrar: Registrar,
    *,
    launcher: Launcher | None = None,
    spawner: Spawner | None = None,
    wire: Literal["raw"],
    network: PrivateNetwork | None = None,
    workspace_read_only: bool = False,
    env: dict[str, str] | None = None,
) -> AbstractAsyncContextManager[SupervisedProcess]: ...


def spawned(
    request: ChildRequest,
    registrar: Registrar,
    *,
    launcher: Launcher | None = None,
    spawner: Spawner | None = None,
    wire: Literal["tether", "raw"] = "tether",
    network: PrivateNetwork | None = None,
    workspace_read_only: bool = False,
    env: dict[str, str] | None = None,
) -> AbstractAsyncContextManager[SupervisedProcess]:
    """Start one local child process for `request` through the one spawn path, registered
    while it lives; leaving the context disposes of it (the ladder). Raises `SpawnError` when
    it cannot start. `wire="raw"`: a foreign agent whose pipes the caller drives; `network`,
    `workspace_read_only`: a sandboxed foreign agent's; `env`: the child's environment when
    the caller has built it (see `spawn_child`)."""
    return _spawned(
        request,
        registrar,
        launcher=launcher,
        spawner=spawner,
        wire=wire,
        network=network,
        workspace_read_only=workspace_read_only,
        env=env,
    )


@asynccontextmanager
async def _spawned(
    request: ChildRequest,
    registrar: Registrar,
    *,
    launcher: Launcher | None,
    spawner: Spawner | None,
    wire: Literal["tether", "raw"],
    network: PrivateNetwork | None,
    workspace_read_only: bool,
    env: dict[str, str] | None,
) -> AsyncIterator[SupervisedProcess]:
    child = await spawn_child(
        request.config,
        request.limits,
        request.tier,
        request.tag,
        launcher=launcher,
        workspace=request.workspace,
        spawner=spawner,
        level=request.level,
        wire=wire,
        network=network,
        workspace_read_only=workspace_read_only,
        layer=request.layer,
        env=env,
    )
    registrar.register(child)
    try:
        async with child:
            yield child
    finally:
        registrar.unregister(child)
