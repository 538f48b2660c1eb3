"""The contained-exec sequence: what every new child process does before its own code runs.

Shared by the exec trampoline (`trampoline.py`, which then execs the command) and the zygote's
fork path (`tether.child.zygote`, which then runs the child runtime). Both run it in a
single-threaded process, in this order, and any failure ends the process before the child's
first instruction:

0. join the child's cgroups (everything from here on, descendants included, is counted); an
   unsandboxed child that the trampoline runs in place joins on a thread while its runtime
   imports instead, and waits for the join before it loads an agent or serves
   (`inplace.join_meanwhile`), and a zygote's standby has joined before the request;
1. `setsid()` where the spawner did not already (the zygote's fork);
2. PR_SET_PDEATHSIG=SIGKILL, then check that the parent is still the one that started us:
   if it died before the death signal was armed, exit rather than run unsupervised;
3. resource limits, core dumps always off;
4. signal dispositions: for an exec, every one default and none blocked (ignored dispositions
   and the mask survive exec); for a Python child run without an exec (the zygote's fork, the
   trampoline's in-place child), exactly what a freshly started interpreter has;
5. the sandbox (`enter_sandbox`), when the plan asks for one: private mounts (with the
   workspace's git directories guarded: `mounts.guard_git`, and a layered workspace's overlay:
   `layer.py`; without root, both in a user namespace of the process's own), for a foreign
   agent or a run with a network policy the private network namespace with the parent's
   listeners (`netns.py`), the Landlock rule fds, the uid/gid change with every capability
   dropped, the working directory, no_new_privs, the Landlock domain, the seccomp filter —
   last, so nothing before it is filtered.

Only the standard library (see `_sys.py`), and of it only what a bare interpreter has loaded
or builds in: `_signal`, not `signal` (whose enums import `enum`, ≈ 4 ms of every cold spawn
on a 2-core VM); `collections.abc` for annotations only.
"""

from __future__ import annotations

import os
import resource

from tether.contain import privileges
from tether.contain.plan import PRIVATE_HOME, PRIVATE_RUNTIME, Plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Mapping, Sequence
else:
    import _signal as signal  # the functions and int constants `signal` wraps in enums

PARENT_GONE = 125
LOCAL_SOCKETS_ENV = "TETHER_LOCAL_SOCKETS"
"""Set in a sandboxed child's environment when its plan asked for local UNIX sockets and it
got none (`refused: WHY`): its private mounts could not be sealed."""
EXEC_FAILED = "tether-trampoline: exec failed:"
"""The line a process that could not become the child writes to stderr (the parent reads it
and reports `spawn_failed` with the rest of the line)."""


class SandboxError(Exception):
    """The sandbox the plan asks for could not be set up; the child must not run."""


def join_cgroups(procs_files: Sequence[str]) -> None:
    for procs in procs_files:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))


def arm_death_signal(ppid: int) -> None:
    privileges.set_pdeathsig(int(signal.SIGKILL))
    if os.getppid() != ppid:
        os._exit(PARENT_GONE)


def apply_rlimits(rlimits: Mapping[str, Sequence[int]]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, (soft, hard) in rlimits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))


def signals_for_exec() -> None:
    """Every disposition default and nothing blocked, as a program expects to start: ignored
    signals and the blocked mask survive exec, so a supervisor that ignores SIGQUIT or SIGHUP
    (a test runner, `nohup`) would pass that on, and Python's own SIGPIPE and SIGXFSZ would keep
    a child writing past its file size limit from ever being told."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def signals_for_python() -> None:
    """Dispositions and mask as a fresh interpreter has them: everything default except what
    Python itself sets up at start (SIGPIPE and SIGXFSZ ignored, SIGINT raising
    KeyboardInterrupt), exactly as a cold-started child has after exec."""
    signals_for_exec()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def contain(
    *,
    cgroup_procs: Sequence[str] = (),
    setsid: bool = False,
    ppid: int | None = None,
    rlimits: Mapping[str, Sequence[int]] | None = None,
    for_exec: bool = True,
    plan: Plan | None = None,
    userns: int | None = None,
    sealer: int | None = None,
) -> None:
    """Steps 0-5 (see the module docstring). `ppid`: arm the death signal against this
    parent; `None`: no death signal. `userns`: an fd of a user namespace with the plan's
    `workspace_idmap`, made ahead; `sealer`: one of `mounts.unmapped_userns()`, made ahead;
    both closed here whatever happens, so the child never holds them. Raises `OSError` or
    `SandboxError`."""
    try:
        _contain(cgroup_procs, setsid, ppid, rlimits, for_exec, plan, userns, sealer)
    finally:
        for fd in (userns, sealer):
            if fd is not None:
                os.close(fd)


def _contain(
    cgroup_procs: Sequence[str],
    setsid: bool,
    ppid: int | None,
    rlimits: Mapping[str, Sequence[int]] | None,
    for_exec: bool,
    plan: Plan | None,
    userns: int | None,
    sealer: int | None,
) -> None:
    join_cgroups(cgroup_procs)
    if setsid:
        os.setsid()
    if ppid is not None:
        arm_death_signal(ppid)
    apply_rlimits(rlimits or {})
    if for_exec:
        signals_for_exec()
    else:
        signals_for_python()
    if plan is not None and plan.sandboxed:
        enter_sandbox(plan, userns=userns, sealer=sealer)
        if ppid is not None:
            # A change of credentials clears the death signal: arm it again, and check again
            # that the parent did not die in between.
            arm_death_signal(ppid)


def _private_dirs(plan: Plan) -> None:
    """HOME and the runtime dir in the private /tmp, owned by the sandbox uid."""
    for path, mode in ((plan.home or PRIVATE_HOME, 0o700), (PRIVATE_RUNTIME, 0o700)):
        os.makedirs(path, mode=mode, exist_ok=True)
        if plan.uid is not None and plan.gid is not None:
            os.chown(path, plan.uid, plan.gid)


def workspace_idmap(plan: Plan) -> tuple[int, int, int, int] | None:
    """(owner uid, sandbox uid, owner gid, sandbox gid): how the plan's private mounts map the
    workspace, so that the sandbox uid owns what the workspace's owner owns; `None` when the
    workspace is bound unmapped (or there are no private mounts)."""
    if not (plan.sandboxed and plan.private_mounts and plan.workspace):
        return None
    if plan.owner is None or plan.uid is None or plan.gid is None:
        return None
    return (plan.owner[0], plan.uid, plan.owner[1], plan.gid)


def local_sockets(plan: Plan) -> bool:
    """Whether this child may `connect` to UNIX sockets: the plan asks, and it can keep the
    promise `Plan.local_sockets` makes — abstract sockets scoped (Landlock ABI 6), and pathname
    sockets sealed by the private mounts or resolved by Landlock (ABI 9)."""
    from tether.contain.landlock import RESOLVE_UNIX_ABI, SCOPE_ABI

    if not (plan.local_sockets and plan.sandboxed and plan.network is None):
        return False
    return plan.abi >= SCOPE_ABI and (plan.private_mounts or plan.abi >= RESOLVE_UNIX_ABI)


def enter_sandbox(plan: Plan, *, userns: int | None = None, sealer: int | None = None) -> None:
    """Step 5: confine this process as `plan` says; raises `SandboxError`. `userns`,
    `sealer`: see `contain` (the caller closes them)."""
    try:
        _enter(plan, userns, sealer)
    except SandboxError:
        raise
    except OSError as exc:
        raise SandboxError(f"the sandbox could not be set up: {exc}") from exc


def _private_view(plan: Plan, userns: int | None, sealer: int | None) -> list[str]:
    """Root: the child's private mount namespace, laid out from the plan, its git directories
    guarded; what could not be sealed."""
    from tether.contain import mounts

    uid = plan.uid if plan.uid is not None else os.geteuid()
    gid = plan.gid if plan.gid is not None else os.getegid()
    lay = mounts.layout(
        plan.reads,
        plan.workspace,
        lambda d: mounts.can_traverse(d, uid, [gid]),
    )
    if plan.workspace and plan.git_guard:
        mounts.prepare_git(plan.workspace, plan.git_guard)
    applied = mounts.private_namespace(
        lay,
        idmap=workspace_idmap(plan),
        userns=userns,
        workspace_read_only=plan.workspace_read_only,
        protect=plan.protect,
        seal=local_sockets(plan),
        sealer=sealer,
        devices=plan.devices,
        # Not the writes: they are the private tmpfs, whatever the host mounts there.
        needed=[*plan.reads, *([plan.workspace] if plan.workspace else [])],
        hide=plan.hide,
        layer=plan.layer,
    )
    if plan.workspace and plan.git_guard:
        mounts.guard_git(plan.workspace, plan.git_guard)
    _private_dirs(plan)
    return applied.unsealed


def _own_view(plan: Plan) -> None:
    """Without root: the child's home, and where it has a git guard or a layer, a user
    namespace of its own to mount them in (`mounts.user_namespace`)."""
    from tether.contain import mounts

    if plan.home:
        os.makedirs(plan.home, mode=0o700, exist_ok=True)
    if plan.workspace and (plan.git_guard or plan.layer):
        if plan.git_guard:
            mounts.prepare_git(plan.workspace, plan.git_guard)
        mounts.user_namespace(os.geteuid(), os.getegid())
        if plan.layer:
            from tether.contain import layer

            layer.over_path(plan.workspace, plan.layer, read_only=plan.workspace_read_only)
        if plan.git_guard:
            mounts.guard_git(plan.workspace, plan.git_guard)


def _enter(plan: Plan, userns: int | None, sealer: int | None) -> None:
    # Imported here: a child at the process level never pays for them.
    from tether.contain import landlock, seccomp

    if plan.abi < 1:
        raise SandboxError("the plan has no Landlock ABI (Landlock is unavailable)")
    unsealed: list[str] = []
    if plan.private_mounts:
        unsealed = _private_view(plan, userns, sealer)
    else:
        _own_view(plan)
    network = plan.network
    ports = [int(p) for p in network["ports"]] if network is not None else []
    if network is not None and network.get("channel") is not None:
        from tether.contain import netns

        # As root, before the uid change: a new network namespace needs CAP_SYS_ADMIN.
        netns.enter_private_namespace(ports, int(network["channel"]))
    # Rule fds are opened now, while every granted path is still reachable.
    rules = landlock.Ruleset(plan.abi)
    rules.allow_all(plan.reads, landlock.READ)
    rules.allow_all(plan.writes, landlock.WRITE)
    if plan.workspace:
        rules.allow(plan.workspace, landlock.READ if plan.workspace_read_only else landlock.WRITE)
    rules.allow_all(plan.devices, landlock.DEVICE)
    for port in ports:
        rules.allow_port(port, landlock.NET_CONNECT_TCP)
    if plan.uid is not None and plan.gid is not None:
        privileges.drop_to(plan.uid, plan.gid)
    elif not plan.private_mounts and plan.workspace and (plan.git_guard or plan.layer):
        privileges.drop_namespace_capabilities()
    else:
        privileges.drop_capabilities_unprivileged()
    if plan.cwd:
        os.chdir(plan.cwd)
    privileges.set_no_new_privs()
    rules.restrict_self()
    sockets = local_sockets(plan)
    if sockets and unsealed and plan.abi < landlock.RESOLVE_UNIX_ABI:
        # The view could not be sealed (and Landlock cannot tell sockets apart): no connect,
        # and the child is told why (its tools, its agent, a person reading its environment).
        sockets = False
        os.environ[LOCAL_SOCKETS_ENV] = f"refused: {unsealed[0]}"
    if plan.seccomp:
        seccomp.install(inet=network is not None, unix_connect=sockets)
