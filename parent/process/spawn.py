"""Spawning one child process the way every child process is spawned.

`spawn_child()` is the one place a child process is made: the scrubbed environment with a
fresh tree marker, the child's own cgroup (on a cgroup tier) with its limits, rlimits for the
rest, the launcher's argv around the command, and the process started through the trampoline
(exec) or forked by the zygote — either way contained before the child's first line runs. It
returns a `SupervisedChild` for a child that speaks tether's protocol, or, with `wire="raw"`,
a `SupervisedProcess` whose pipes the caller drives (a foreign agent: every provider that runs
a process goes through here). The handshake, whatever carries the child, is `wired.handshake`.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal, Protocol, overload

from tether.parent.process.cgroups import ChildCgroup, cgroupfs_mount_points
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.parent.process.env import build_child_env
from tether.parent.process.host import Host
from tether.parent.process.isolation import isolation_setup, merged_env
from tether.parent.process.launchers import (
    LaunchContext,
    Launcher,
    Local,
    Pidns,
    resolve_launcher,
)
from tether.parent.process.limits import Limits, inherited_open_files
from tether.parent.process.markers import TREE_ENV, new_tree_marker
from tether.parent.process.private_network import PrivateNetwork
from tether.parent.process.proc import ChildProcess, SpawnError
from tether.parent.process.start import SpawnSpec
from tether.parent.process.supervised import SupervisedChild, SupervisedProcess
from tether.parent.process.zygote import ZygoteProcess
from tether.parent.process.zygote import supported as zygote_supported

log = logging.getLogger("tether.parent")

Spawner = Callable[[SpawnSpec], Awaitable[ChildProcess]]
"""Starts the process for a spec: `exec_spawn` (exec through the trampoline) or the zygote's
fork, which is a request to the zygote, awaited."""


async def exec_spawn(spec: SpawnSpec) -> ChildProcess:
    """The exec spawner: `ChildProcess.spawn` (it returns once the trampoline has exec'd)."""
    return ChildProcess.spawn(spec)


class AutoSpawner:
    """The default spawner of tether's own child (`spawner="auto"`): the zygote's fork, or
    exec through the trampoline when the zygote cannot serve this child (it could not start,
    the child's environment does not fit it, it died). `fallback` says why exec ran."""

    def __init__(
        self, fork: Spawner | None, fallback: str | None = None, contains: str | None = None
    ) -> None:
        self._fork = fork
        self.fallback = fallback
        """Why the zygote did not start the child (`None`: it did, or nothing was started)."""
        self.contains = contains
        """The launcher the zygote's own containment stands for (`pidns`: it runs in a PID
        namespace of its own), or `None`. Such a spawner never execs a child itself: a spec
        made for the zygote lacks the launcher, so its caller starts the child again under
        the launcher (`contained_by`)."""

    async def child_cgroup(
        self, host: Host, name: str, *, memory: int | None, pids: int | None
    ) -> ChildCgroup:
        return await cgroup_maker(self._fork)(host, name, memory=memory, pids=pids)

    async def __call__(self, spec: SpawnSpec) -> ChildProcess:
        if self._fork is not None:
            try:
                return await self._fork(spec)
            except SpawnError as exc:
                self.fallback = f"the zygote could not fork the child: {exc}"
                if self.contains is not None:
                    raise
        log.warning("starting the child by exec: %s", self.fallback)
        return ChildProcess.spawn(spec)


class CgroupMaker(Protocol):
    def __call__(
        self, host: Host, name: str, *, memory: int | None, pids: int | None
    ) -> Awaitable[ChildCgroup]: ...


async def new_cgroup(host: Host, name: str, *, memory: int | None, pids: int | None) -> ChildCgroup:
    """The cgroup maker of a spawner that makes none itself: a new cgroup."""
    return ChildCgroup.create(host, name, memory=memory, pids=pids)


def cgroup_maker(spawner: Spawner | None) -> CgroupMaker:
    """How a child's cgroup is made for `spawner`: a spawner may make it itself (a
    `child_cgroup` method: the zygote's standby waits in a cgroup made ahead), or it is new."""
    made: CgroupMaker | None = getattr(spawner, "child_cgroup", None)
    return made if made is not None else new_cgroup


def contained_by(spawner: Spawner | None, launcher: Launcher) -> bool:
    """Whether `spawner` is a zygote whose own containment is `launcher`'s (a zygote in a PID
    namespace of its own for the `pidns` launcher): its children are then forked as local
    ones, inside it, and not started under the launcher."""
    contains = getattr(spawner, "contains", None)
    return contains is not None and contains == launcher.name


def spawner_name(proc: ChildProcess) -> str:
    """Which spawner started this process: `zygote` or `exec`."""
    return "zygote" if isinstance(proc, ZygoteProcess) else "exec"


def child_env(cfg: ChildConfig) -> dict[str, str]:
    """The environment a child of this config starts with (before its tree marker)."""
    return build_child_env(os.environ, pass_through=cfg.pass_env, explicit=cfg.env)


@overload
async def spawn_child(
    cfg: ChildConfig,
    limits: Limits,
    host: Host,
    tag: str,
    *,
    launcher: Launcher | None = None,
    workspace: str | None = None,
    spawner: Spawner | None = None,
    level: str = "process",
    wire: Literal["tether"] = "tether",
    network: PrivateNetwork | None = None,
    workspace_read_only: bool = False,
    layer: str | None = None,
    env: dict[str, str] | None = None,
) -> SupervisedChild: ...


@overload
async def spawn_child(
    cfg: ChildConfig,
    limits: Limits,
    host: Host,
    tag: str,
    *,
    launcher: Launcher | None = None,
    workspace: str | None = None,
    spawner: Spawner | None = None,
    level: str = "process",
    wire: Literal["raw"],
    network: PrivateNetwork | None = None,
    workspace_read_only: bool = False,
    layer: str | None = None,
    env: dict[str, str] | None = None,
) -> SupervisedProcess: ...


async def spawn_child(
    cfg: ChildConfig,
    limits: Limits,
    host: Host,
    tag: str,
    *,
    launcher: Launcher | None = None,
    workspace: str | None = None,
    spawner: Spawner | None = None,
    level: str = "process",
    wire: Literal["tether", "raw"] = "tether",
    network: PrivateNetwork | None = None,
    workspace_read_only: bool = False,
    layer: str | None = None,
    env: dict[str, str] | None = None,
) -> SupervisedProcess:
    """Start one child at isolation `level` (its plan computed by `isolation_setup`, the one
    place that decides it); raises `SpawnError` when it cannot start (nothing is left
    behind). `wire="raw"`: a foreign agent whose pipes the caller drives. `network`: the
    listeners of the parent's a sandboxed child may reach (its `channel` descriptor is passed
    to the child); `workspace_read_only`: the sandbox grants the workspace read only; `layer`:
    a layered workspace's layer directory, an overlay over the workspace (`Plan.layer`);
    `env`: `child_env(cfg)` when the caller has it already (it is not built twice).

    A zygote that stands for the launcher (`contained_by`) forks the child as a local one,
    in its own containment; when it cannot (`spawner="auto"`), the child is started by exec
    under the launcher, as without it."""
    spawn = functools.partial(
        _spawn_child,
        cfg,
        limits,
        host,
        tag,
        workspace=workspace,
        level=level,
        wire=wire,
        network=network,
        workspace_read_only=workspace_read_only,
        layer=layer,
        base_env=child_env(cfg) if env is None else env,
    )
    if launcher is not None and contained_by(spawner, launcher):
        try:
            return await spawn(launcher=Local(), spawner=spawner)
        except SpawnError:
            if not isinstance(spawner, AutoSpawner):
                raise
            spawner = None  # its `fallback` says why
    return await spawn(launcher=launcher, spawner=spawner)


async def _spawn_child(
    cfg: ChildConfig,
    limits: Limits,
    host: Host,
    tag: str,
    *,
    launcher: Launcher | None,
    workspace: str | None,
    spawner: Spawner | None,
    level: str,
    wire: Literal["tether", "raw"],
    network: PrivateNetwork | None,
    workspace_read_only: bool,
    layer: str | None,
    base_env: dict[str, str],
) -> SupervisedProcess:
    setup = isolation_setup(
        level,
        command=cfg.command,
        workspace=workspace,
        sandbox_user=cfg.sandbox_user,
        read_paths=cfg.read_paths,
        launcher=launcher,
        deny_paths=cfg.deny_paths,
        network=network,
        workspace_read_only=workspace_read_only,
        allow_git_config=cfg.allow_git_config,
        layer=layer,
    )
    in_cgroup = host.tier != "process-group"
    try:
        marker = new_tree_marker()
        env = merged_env(base_env, setup.setup, cfg.env)
        env[TREE_ENV] = marker
        argv = _launched(setup.argv, env, cfg, limits, launcher, workspace)
        rlimits = _rlimits(limits, host, in_cgroup=in_cgroup)
    except BaseException:
        if setup.setup.cleanup is not None:
            setup.setup.cleanup()
        raise
    # Made last, right before the spawner runs: a zygote's standby may already be in it.
    try:
        cgroup = await _cgroup(spawner, host, tag, limits) if in_cgroup else None
    except BaseException as exc:
        if setup.setup.cleanup is not None:
            setup.setup.cleanup()
        if isinstance(exc, OSError):
            raise SpawnError(f"cannot create the child's cgroup: {exc.strerror or exc}") from exc
        raise
    spec = SpawnSpec(
        argv,
        env,
        cwd=None,
        rlimits=rlimits,
        cgroup_procs=cgroup.procs_files if cgroup else [],
        plan=setup.outer_plan,
        pass_fds=(network.channel,) if network is not None and network.channel is not None else (),
    )
    try:
        proc = await (spawner or exec_spawn)(spec)
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        if setup.setup.cleanup is not None:
            setup.setup.cleanup()
        raise
    child = _supervised(proc, marker, cfg, cgroup, wire)
    child.observed.limits = limits
    child.sealed_in_cgroup = sealed_in_cgroup(cgroup, setup.outer_plan, launcher)
    local = launcher is None or isinstance(launcher, Local)
    child.private_mounts = local and bool(
        setup.outer_plan and setup.outer_plan.get("private_mounts")
    )
    child.cleanup = setup.setup.cleanup
    return child


def _launched(
    argv: list[str],
    env: dict[str, str],
    cfg: ChildConfig,
    limits: Limits,
    launcher: Launcher | None,
    workspace: str | None,
) -> list[str]:
    """The command as the launcher runs it (a local one runs it as it is)."""
    if launcher is None or isinstance(launcher, Local):
        return argv
    return launcher.argv(
        LaunchContext(
            command=argv,
            env=env,
            explicit_env=dict(cfg.env),
            workspace=workspace or ".",
            limits=limits,
            read_paths=tuple(cfg.read_paths),
        )
    )


def _rlimits(limits: Limits, host: Host, *, in_cgroup: bool) -> dict[str, tuple[int, int]]:
    """The child's rlimits: those its cgroup does not enforce, and the open-files limit it
    would have inherited."""
    rlimits = limits.rlimits(
        memory_in_cgroup=in_cgroup and host.enforces("memory"),
        pids_in_cgroup=in_cgroup and host.enforces("pids"),
    )
    inherited = inherited_open_files()
    if inherited is not None and "RLIMIT_NOFILE" not in rlimits:
        # The supervisor raised its own soft limit (`raise_open_files_limit`); the child
        # starts with the one it would have inherited.
        rlimits["RLIMIT_NOFILE"] = (inherited, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    return rlimits


async def _cgroup(spawner: Spawner | None, host: Host, tag: str, limits: Limits) -> ChildCgroup:
    return await cgroup_maker(spawner)(
        host,
        f"{os.getpid()}-{tag}-{os.urandom(3).hex()}",
        memory=limits.memory_bytes,
        pids=limits.processes,
    )


def _supervised(
    proc: ChildProcess, marker: str, cfg: ChildConfig, cgroup: ChildCgroup | None, wire: str
) -> SupervisedProcess:
    """The started process under supervision: a tether child, or a raw one (`wire="raw"`)."""
    if wire == "raw":
        return SupervisedProcess(
            proc, marker, dispose=cfg.dispose, cgroup=cgroup, ring_bytes=cfg.stderr_ring_bytes
        )
    return SupervisedChild(
        proc,
        marker,
        dispose=cfg.dispose,
        cgroup=cgroup,
        max_message_bytes=cfg.max_message_bytes,
        ring_bytes=cfg.stderr_ring_bytes,
    )


def sealed_in_cgroup(
    cgroup: ChildCgroup | None,
    plan: Mapping[str, object] | None,
    launcher: Launcher | None,
    mounts: Callable[[], list[str]] = cgroupfs_mount_points,
) -> bool:
    """Whether nothing of a child's tree can leave its cgroup, so that its v2 cgroup saying
    `populated 0` proves the whole tree is gone (`SupervisedProcess.sealed_in_cgroup`).

    So: the cgroup has a v2 directory; the child runs on this host (no launcher but the local
    one) under a sandbox that our trampoline or the zygote applied before its first
    instruction (`plan`, the outer plan); that sandbox has Landlock (no write outside the paths
    it grants, so no `cgroup.procs` anywhere) and seccomp (`clone3` refused, so no
    `CLONE_INTO_CGROUP`); and no path it grants for writing is, or holds, a cgroup filesystem.
    `mounts`: the cgroup filesystems' mount points (this host's, by default)."""
    if cgroup is None or not cgroup.announces_empty or not plan:
        return False
    if launcher is not None and not isinstance(launcher, Local):
        return False
    if plan.get("level") != "sandbox" or not plan.get("seccomp"):
        return False
    abi = plan.get("abi")
    if not isinstance(abi, int) or abi < 1:
        return False
    writes = [plan.get("workspace"), *_paths(plan.get("writes")), plan.get("home")]
    granted = [os.path.normpath(str(p)) for p in writes if p]
    for point in mounts():
        for path in granted:
            if _within(point, path) or _within(path, point):
                return False
    return True


def _paths(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def _within(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def missing_command(command: Sequence[str], env: Mapping[str, str], what: str = "") -> str | None:
    """Why `command` cannot be started with `env`'s PATH, or `None` when it can."""
    exe = command[0]
    if what:
        exe_missing = missing_command(command, env)
        return f"{exe_missing} ({what})" if exe_missing else None
    if os.sep in exe:
        if not os.path.exists(exe):
            return f"cannot start {exe!r}: no such file"
        if not os.access(exe, os.X_OK):
            return f"cannot start {exe!r}: not executable"
        return None
    if shutil.which(exe, path=env.get("PATH", os.defpath)) is None:
        return f"cannot start {exe!r}: command not found on the child's PATH"
    return None


def check_spawner(cfg: ChildConfig) -> None:
    """Refuse a spawner the config cannot use (bad usage, before anything is spawned)."""
    if cfg.spawner in ("exec", "auto"):
        return
    if cfg.spawner != "zygote":
        raise ValueError(f"spawner {cfg.spawner!r}: expected 'auto', 'exec' or 'zygote'")
    why = zygote_unfit(cfg)
    if why is not None:
        raise ValueError(why)


def zygote_unfit(cfg: ChildConfig) -> str | None:
    """Why the zygote cannot start this config's children, or `None` when it can."""
    if tuple(cfg.command[: len(DEFAULT_COMMAND)]) != DEFAULT_COMMAND:
        return (
            "spawner='zygote' forks tether's own child runtime: it serves only the default "
            f"command ({' '.join(DEFAULT_COMMAND)}), not {' '.join(cfg.command)!r}"
        )
    if not isinstance(resolve_launcher(cfg.launcher), Local | Pidns):
        return (
            "spawner='zygote' forks local children only (launcher='local', or 'pidns': a "
            "zygote in a PID namespace of its own)"
        )
    why = zygote_supported()
    if why is not None:
        return f"spawner='zygote' is not available on this host: {why}"
    return None


def wants_zygote(cfg: ChildConfig) -> bool:
    """Whether this config's children are forked by the zygote: `zygote`, or `auto` for
    tether's own child under the local launcher on a host that supports it."""
    if cfg.spawner == "zygote":
        return True
    return cfg.spawner == "auto" and zygote_unfit(cfg) is None
