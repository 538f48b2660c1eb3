"""Isolation levels: which one a run gets, and the plan that gives a child exactly that.

Theory of operation
-------------------
Two levels, chosen per run (`ChildConfig(isolation=...)`, `tether run --isolation`):

- `sandbox`: the child runs in a Landlock domain with a seccomp filter and no_new_privs; when
  the supervisor is root, also as a dedicated unprivileged uid/gid with every capability
  dropped, in a private mount namespace (private /tmp, /var/tmp, /dev/shm; directories it
  cannot traverse covered; the workspace bind-mounted idmapped). What the child may read is
  named path by path: the system directories, named /etc entries, the interpreter, the child's
  import path, tether's own folders and absolute paths in the command; it writes only the
  workspace and its private temp directories, except its repository's `.git/config` and
  `.git/hooks` (`git_guard`: git runs what they name on the user's next command; a run opts
  in with `ChildConfig(allow_git_config=True)`; without root the guard takes a user namespace
  of the child's own, and a host that forbids one is found by the probe and goes without).
  See docs/containment.md for what each part stops.
- `process`: the environment scrub, session, limits and containment tier only.

`auto` (the default) is the strongest level this host supports. Whether `sandbox` works is
decided once per process by *trying it* (`probe_host()`): a throwaway child gets the full sandbox
and runs `/bin/true`, so a host that has Landlock but blocks user namespaces or idmapped
mounts is found out before a run, not in one. A host that cannot sandbox is said loudly:
`auto` settles for `process` with a warning in every result, one stderr line per supervisor
and in `tether doctor`; asking for `sandbox` there is bad usage with one actionable message.

`plan_for()` is the one place a child's plan is computed: a pure function of the run's
command, workspace, config and the host, so what a child was granted is inspectable.

`TETHER_LANDLOCK_ABI=N` in the supervisor's environment caps the Landlock ABI the probe
reports (0: Landlock unavailable), to exercise the degraded paths on a capable host.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.contain import argv as config_word
from tether.contain import gitdirs, landlock, mounts, seccomp
from tether.contain.inplace import (
    TRAMPOLINE,
    import_path_writable,
    runs_in_place,
    trampoline_argv,
)
from tether.contain.plan import (
    DEFAULT_SANDBOX_ID,
    PRIVATE_HOME,
    PRIVATE_RUNTIME,
    Plan,
    system_reads,
)
from tether.contain.sequence import EXEC_FAILED, LOCAL_SOCKETS_ENV
from tether.parent.process.host import pid_alive
from tether.parent.process.once import TriedOnce
from tether.parent.process.private_network import PrivateNetwork
from tether.protocol.messages import IsolationLevel

LEVELS = ("sandbox", "process")
CHOICES = ("auto", *LEVELS)
FORCE_ABI_ENV = "TETHER_LANDLOCK_ABI"
MIN_ABI_ROOT = 2
"""As root the uid change and seccomp close what later ABIs add; ABI 2 is needed so renames
across directories (mv, pip, git) work inside the workspace instead of failing with EXDEV."""
MIN_ABI_USER = 6
"""Without a uid change, the child shares the supervisor's uid: only ABI 6's signal scoping
keeps it from killing the supervisor, and ABI 3's TRUNCATE from truncating the user's files."""
TRIAL_SECONDS = 20.0

SANDBOX_PACKAGES = (
    # The top package first: every `tether.X` import reads its `__init__`, which a strict
    # editable install links from the checkout's `api/` (a child with no bytecode cache to
    # use, or a stale one, reads that source).
    "tether",
    "tether.contain",
    "tether.protocol",
    "tether.wire",
    "tether.child",
    "tether.parent",
)


@dataclass(frozen=True)
class HostIsolation:
    """What this host offers for isolation."""

    root: bool
    landlock_abi: int
    """The ABI a sandbox is built for: the kernel's, capped at `landlock.MAX_ABI` and by
    `TETHER_LANDLOCK_ABI`; 0 without Landlock."""
    why_not: str | None
    """Why `sandbox` is unavailable here; `None` when it works."""
    forced: bool = False
    """`TETHER_LANDLOCK_ABI` lowered the ABI."""
    local_sockets: bool = False
    """A sandboxed child may connect to the UNIX sockets its run binds (and to no other):
    `local_sockets_why` says how, or why not."""
    local_sockets_why: str = ""
    install_problem: str | None = None
    """tether's own installation is broken (the trampoline cannot start): no child runs at
    any level, and the host's sandbox is untried."""
    git_unguarded: str | None = None
    """Why the sandbox here cannot refuse writes to the workspace's `.git/config` and
    `.git/hooks` (`Plan.git_guard`); `None` when it can. Without root that takes a user
    namespace, which some hosts forbid; the parent's watch (`sensitiveChanges`) and the
    verifier are then all there is."""

    @property
    def best(self) -> str:
        return "sandbox" if self.why_not is None else "process"


@dataclass(frozen=True)
class Choice:
    level: IsolationLevel
    warning: str | None = None
    """Why the level is weaker than `sandbox`, when `auto` had to settle for less."""


@dataclass
class Setup:
    """What `plan_for` decided for one child."""

    plan: Plan
    env: dict[str, str] = field(default_factory=dict)
    """Variables the sandbox sets (HOME, TMPDIR, XDG_*), unless the caller set them."""
    cleanup: Callable[[], None] | None = None
    """Run once the child is gone (removes a non-root sandbox's private directory)."""


_probes: TriedOnce[str, HostIsolation] = TriedOnce(lambda forced: _probe(forced))
"""The host's answers, by `TETHER_LANDLOCK_ABI` value (`_probe` looked up at each trial)."""


def probe_host() -> HostIsolation:
    """What this host supports, tried once per process (per `TETHER_LANDLOCK_ABI` value)."""
    return _probes.get(os.environ.get(FORCE_ABI_ENV, ""))


def probe_host_in_thread(name: str) -> None:
    """Start `probe_host()`'s trial in a thread of its own (`name`) and return at once; any
    `probe_host()` from now on waits for that trial's answer. A trial that raises leaves the
    next `probe_host()` to try again, and say what failed."""
    _probes.start_in_thread(os.environ.get(FORCE_ABI_ENV, ""), name)


async def probe_host_off_loop() -> HostIsolation:
    """`probe_host()`, its first time in a worker thread: the trial child it runs (≈ 40-60 ms)
    then holds up no other task of the event loop (another run's I/O, a deadline, a ladder)."""
    return await _probes.get_off_loop(os.environ.get(FORCE_ABI_ENV, ""))


def _probe(forced: str) -> HostIsolation:
    root = os.geteuid() == 0
    kernel = landlock.kernel_abi()
    abi = min(kernel, landlock.MAX_ABI)
    is_forced = False
    if forced:
        try:
            cap = int(forced)
        except ValueError:
            cap = 0
        if cap < abi:
            abi, is_forced = max(cap, 0), True
    need = MIN_ABI_ROOT if root else MIN_ABI_USER
    why: str | None = None
    how = f" ({FORCE_ABI_ENV}={forced})" if is_forced else ""
    if abi == 0:
        why = (
            f"Landlock is not available{how} (needs Linux 5.13+ with landlock in the lsm= "
            "boot list)"
        )
    elif abi < need:
        why = (
            f"Landlock ABI {abi}{how} is older than the {need} a "
            f"{'root' if root else 'non-root'} supervisor's sandbox needs "
            f"(Linux {'5.19' if need == 2 else '6.12'}+)"
        )
    elif not seccomp.available():
        why = "seccomp filters are not available on this kernel or architecture"
    if why is not None:
        return HostIsolation(root=root, landlock_abi=abi, why_not=why, forced=is_forced)
    sockets, sockets_why = _local_sockets(abi, root)
    trial = _trial(abi, root, local_sockets=sockets, git=True)
    unguarded = None
    if trial.why is not None and trial.install_problem is None:
        # The sandbox with a guarded git directory failed: does it work without the guard?
        plain = _trial(abi, root, local_sockets=sockets, git=False)
        if plain.why is None:
            unguarded, trial = trial.why, plain
    if sockets and trial.refused_sockets is not None:
        sockets, sockets_why = False, trial.refused_sockets
    return HostIsolation(
        root=root,
        landlock_abi=abi,
        why_not=trial.why if trial.install_problem is None else None,
        forced=is_forced,
        local_sockets=sockets and trial.why is None,
        local_sockets_why=sockets_why,
        install_problem=trial.install_problem,
        git_unguarded=unguarded,
    )


def _local_sockets(abi: int, root: bool) -> tuple[bool, str]:
    """Whether this host's sandbox can let a child connect to its run's own UNIX sockets and to
    no other (`Plan.local_sockets`), and how, or why not."""
    if abi >= landlock.RESOLVE_UNIX_ABI:
        return True, (
            f"Landlock ABI {abi} resolves pathname sockets (only beneath the workspace and the "
            "private temp dirs, or bound in the run's own domain) and scopes abstract ones"
        )
    if not root:
        return False, (
            f"refused: a supervisor that is not root cannot give the sandbox a private view of "
            f"the filesystem, and Landlock ABI {abi} cannot tell the run's own sockets from the "
            f"host's (that needs ABI {landlock.RESOLVE_UNIX_ABI}, Linux 7.1+): connect() is "
            "refused outright"
        )
    if abi < landlock.SCOPE_ABI:
        return False, (
            f"refused: Landlock ABI {abi} does not keep abstract sockets inside the run (that "
            f"needs ABI {landlock.SCOPE_ABI}, Linux 6.12+): connect() is refused outright"
        )
    return True, (
        "sealed private mounts (every host mount idmapped so no outside socket passes the "
        f"permission check, a private /dev) and Landlock ABI {abi}'s abstract-socket scope"
    )


SCRATCH_PREFIX = "tether-probe-"
"""The trial's scratch directory in the temp dir: `tether-probe-<pid>-<random>`."""


def sweep_stale_scratch() -> list[str]:
    """Remove the trial scratch directories of supervisors that are no longer alive (one
    SIGKILLed mid-probe cannot remove its own); only this user's. What was removed."""
    removed: list[str] = []
    where = tempfile.gettempdir()
    try:
        names = os.listdir(where)
    except OSError:
        return removed
    for name in names:
        owner = name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if not name.startswith(SCRATCH_PREFIX) or not owner.isdigit() or pid_alive(int(owner)):
            continue
        path = os.path.join(where, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            removed.append(path)
    return removed


@dataclass(frozen=True)
class _Trial:
    why: str | None = None
    """Why the trial sandbox failed; `None` when it ran."""
    refused_sockets: str | None = None
    """It ran, but its local sockets were refused, and why (its private mounts could not be
    sealed: `LOCAL_SOCKETS_ENV`)."""
    install_problem: str | None = None
    """It failed before any sandbox: the trampoline itself could not start."""


def _trial(abi: int, root: bool, *, local_sockets: bool, git: bool, layer: bool = False) -> _Trial:
    """Sandbox a throwaway child that prints its environment (`env`), with a git directory in
    its workspace to guard when `git`, its workspace layered (an overlay) when `layer`: how it
    went. The trial is granted what a Python child is (the interpreter's paths too), so the
    mounts it seals are the ones a real child's view has."""
    true = shutil.which("env", path="/usr/bin:/bin") or "/usr/bin/env"
    sweep_stale_scratch()
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as scratch:
        ws = os.path.join(scratch, "ws")
        os.mkdir(ws)
        layered = None
        if layer:
            layered = os.path.join(scratch, "layer")
            for sub in ("upper", "work"):
                os.makedirs(os.path.join(layered, sub))
                if root:
                    os.chown(os.path.join(layered, sub), DEFAULT_SANDBOX_ID, DEFAULT_SANDBOX_ID)
        if git:
            os.makedirs(os.path.join(ws, ".git", "hooks"))
            Path(ws, ".git", "config").write_text("[core]\n")
        setup = plan_for(
            "sandbox",
            command=[true],
            workspace=ws,
            host=HostIsolation(
                root=root, landlock_abi=abi, why_not=None, local_sockets=local_sockets
            ),
            layer=layered,
        )
        word = config_word.encode(
            {"pdeathsig": 0, "ppid": os.getpid(), "plan": setup.plan.to_json()}
        )
        try:
            got = subprocess.run(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(TRAMPOLINE),
                    word,
                    "--",
                    true,
                ],
                env={"PATH": "/usr/bin:/bin", **setup.env},
                capture_output=True,
                timeout=TRIAL_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return _Trial(f"a trial sandbox could not run: {exc}")
        finally:
            if setup.cleanup is not None:
                setup.cleanup()
    if got.returncode == 0:
        told = f"{LOCAL_SOCKETS_ENV}=".encode()
        for line in got.stdout.splitlines():
            if line.startswith(told):
                return _Trial(refused_sockets=line[len(told) :].decode(errors="replace"))
        return _Trial()
    stderr = got.stderr.decode(errors="replace")
    last = (stderr.strip().splitlines() or [""])[-1][:300] or f"exit {got.returncode}"
    if EXEC_FAILED not in stderr:
        # The trampoline never reached its sandbox: tether's installation, not the host.
        return _Trial(
            last,
            install_problem=(
                f"tether's trampoline ({TRAMPOLINE}) cannot start under `{sys.executable} "
                f"-I -S`: {last}. tether's installation is broken: reinstall it (pip install "
                "--force-reinstall, or pip install -e . in a checkout)"
            ),
        )
    return _Trial(f"a trial sandbox failed on this host: {last}")


def trial_layer(host: HostIsolation) -> str | None:
    """Why a sandboxed child here cannot have a layered workspace (an overlay mounted in its
    own mount namespace, `tether.contain.layer`), or `None` when it can: tried once by
    `tether.parent.process.layers.support`, which caches the answer."""
    why = _trial(
        host.landlock_abi, host.root, local_sockets=host.local_sockets, git=False, layer=True
    ).why
    if why is None:
        return None
    return why.replace("a trial sandbox failed", "a trial overlay failed", 1)


def choose_level(
    requested: str, host: HostIsolation | None = None, *, remote_launcher: str | None = None
) -> Choice:
    """The level for `requested` (`auto`, `sandbox`, `process`); raises `ValueError` for an
    unknown name or a `sandbox` this host cannot provide. `remote_launcher`: the child runs
    elsewhere (ssh, docker, kubectl), where no local sandbox reaches it."""
    if requested not in CHOICES:
        raise ValueError(f"isolation {requested!r}: expected one of {', '.join(CHOICES)}")
    if requested == "process":
        return Choice("process")
    if remote_launcher is not None:
        if requested == "sandbox":
            raise ValueError(
                f"isolation 'sandbox' cannot reach a child started by the {remote_launcher!r} "
                "launcher (it runs on another host or in a container); pass "
                "isolation='process' and rely on the launcher's own isolation"
            )
        return Choice(
            "process",
            f"the child runs under the {remote_launcher!r} launcher, outside this host's "
            "sandbox: its isolation is the launcher's",
        )
    host = host or probe_host()
    if host.install_problem is not None:
        raise ValueError(host.install_problem)
    if host.why_not is None:
        return Choice("sandbox")
    if requested == "sandbox":
        raise ValueError(
            f"isolation 'sandbox' is not available on this host: {host.why_not}. Run "
            "`tether doctor` for details, or pass isolation='process' (--isolation process) "
            "to run with process isolation only"
        )
    return Choice(
        "process",
        f"this host cannot sandbox children ({host.why_not}); running with process "
        "isolation only: a hostile child can read what the supervisor's user can read and "
        "reach the network",
    )


# --- the plan -----------------------------------------------------------------------------------


def _pth_dirs(site_dir: str) -> list[str]:
    """Directories a site-packages `.pth` file adds to the import path (not `import` lines)."""
    found: list[str] = []
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
    except OSError:
        return found
    for name in names:
        try:
            lines = Path(site_dir, name).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")):
                continue
            path = os.path.join(site_dir, line)
            if os.path.isdir(path):
                found.append(path)
    return found


@functools.cache
def interpreter_reads() -> tuple[str, ...]:
    """What a `python -I` child needs to read: the interpreter's prefixes and executable, the
    standard library, site-packages and the directories its `.pth` files add, and tether's
    own package folders (both the path Python imports them by and, for an editable install,
    the sources its links point to). Never the supervisor's working directory or other
    entries of its own `sys.path`."""
    paths = [
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ]
    scheme = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if key in scheme:
            paths.append(scheme[key])
    for key in ("purelib", "platlib"):
        if key in scheme:
            paths += _pth_dirs(scheme[key])
    for name in SANDBOX_PACKAGES:
        # Located, not imported: the parent never loads the child's code.
        spec = importlib.util.find_spec(name)
        for where in (spec.submodule_search_locations or []) if spec else []:
            paths.append(where)
            # The directory holding `tether/` (site-packages, a strict editable link tree);
            # a default editable install's sources (a checkout's `contain/`) have none, and
            # their parent is the checkout's own parent: never granted.
            if os.path.basename(os.path.dirname(where)) == "tether":
                paths.append(os.path.dirname(os.path.dirname(where)))
            init = os.path.join(where, "__init__.py")
            if os.path.islink(init):
                paths.append(os.path.dirname(os.path.realpath(init)))
    return tuple(paths)


@functools.cache
def interpreter_code() -> tuple[str, ...]:
    """`interpreter_reads()` that exist, each as given and resolved: the import path of a `-I`
    child (a `.pth` or `sitecustomize` it runs can only come from there). Resolved once, as
    `interpreter_reads` is: every sandboxed spawn asks."""
    return tuple(_normalized(list(interpreter_reads())))


def trampoline_in_place(command: Sequence[str], plan: Mapping[str, Any] | None) -> bool:
    """Whether the trampoline may become `command` in place (`tether.contain.inplace`): tether's
    own child, and nothing of its import path where the child may write."""
    return runs_in_place(command) and not import_path_writable(plan, interpreter_code())


def _named_paths(arg: str) -> list[str]:
    """Absolute paths in one argument: itself, the value of `--flag=PATH`, and the file of a
    `PATH:callable` agent spec."""
    candidates = [arg]
    if arg.startswith("-") and "=" in arg:
        candidates.append(arg.split("=", 1)[1])
    for c in list(candidates):
        if ":" in c:
            candidates.append(c.rsplit(":", 1)[0])
    return [c for c in candidates if os.path.isabs(c) and os.path.exists(c)]


def command_reads(command: Sequence[str]) -> list[str]:
    """Absolute paths a command names: a directory as is, a file with its directory (an
    interpreter imports a script's siblings; `/` itself is never granted)."""
    found: list[str] = []
    for arg in command:
        for path in _named_paths(arg):
            found.append(path)
            if not os.path.isdir(path) and os.path.dirname(path) != "/":
                found.append(os.path.dirname(path))
    return found


@functools.cache
def _base_reads(interpreter: bool) -> tuple[str, ...]:
    """The system paths, and Python's own when `interpreter`: the same for every child."""
    return tuple(_normalized([*system_reads(), *(interpreter_reads() if interpreter else [])]))


def _normalized(paths: Sequence[str]) -> list[str]:
    """Existing absolute paths, each also in its resolved form, `/` never."""
    out: set[str] = set()
    for raw in paths:
        if not raw or not os.path.isabs(raw) or not os.path.exists(raw):
            continue
        for path in (os.path.normpath(raw), os.path.realpath(raw)):
            if path != "/":
                out.add(path)
    return sorted(out)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _read_grants(
    command: Sequence[str], ws: str | None, read_paths: Sequence[str], interpreter: bool = True
) -> list[str]:
    """What a sandboxed child of `command` may read besides its workspace `ws` (resolved)."""
    reads = {*_base_reads(interpreter), *_normalized([*command_reads(command), *read_paths])}
    if ws is not None:
        reads = {p for p in reads if not _under(p, ws)}
    return sorted(reads)


def _denied(paths: Sequence[str]) -> list[str]:
    """Each denied path made absolute, as given and resolved (`/` never)."""
    out: set[str] = set()
    for raw in paths:
        given = os.path.abspath(raw)
        out.update((os.path.normpath(given), os.path.realpath(given)))
    out.discard("/")
    return sorted(out)


SHARED_WRITES = ("/dev/shm",)
"""Writes a sandbox without private mounts grants on the host's own filesystem (its private
temp directory is made fresh for each child, so it never holds anything else)."""


def deny_problem(
    deny_paths: Sequence[str],
    *,
    command: Sequence[str],
    workspace: str,
    read_paths: Sequence[str] = (),
    can_cover: bool,
) -> str | None:
    """Why a sandboxed child cannot be kept out of every one of `deny_paths`, or `None`.
    Landlock grants whole trees and cannot carve a path out of one: a denied directory that a
    grant reaches (it lies inside the workspace, a read grant or a shared write, or holds one)
    can be denied only by covering it with a mount of its own, which only a root supervisor's
    private mounts do (`can_cover`); one that holds the workspace never can."""
    ws = os.path.realpath(workspace)
    grants = [ws, *_read_grants(command, ws, read_paths), *SHARED_WRITES]
    for denied in _denied(deny_paths):
        if _under(ws, denied):
            return (
                f"{denied} must be kept from sandboxed children, and it holds the workspace "
                f"{ws}: use a workspace outside it"
            )
        if can_cover:
            continue
        for grant in grants:
            if _under(denied, grant) or _under(grant, denied):
                how = "lies inside" if _under(denied, grant) else "holds"
                return (
                    f"{denied} must be kept from sandboxed children, and it {how} {grant}, "
                    "which the sandbox grants them; without private mounts (a root "
                    "supervisor, no launcher) the sandbox cannot cover part of a grant: move "
                    f"{denied} elsewhere"
                )
    return None


_KEPT_FROM_WORKSPACES = (
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/boot", "/root",
    "/dev", "/proc", "/sys", "/run", "/tmp", "/var/tmp",
)  # fmt: skip
"""What a sandboxed workspace may not be or contain: the system, and the places the sandbox
replaces with private mounts (a workspace there would be hidden, or would open the system)."""


def workspace_problem(workspace: str, *, protects_code: bool = False) -> str | None:
    """Why `workspace` cannot be a sandboxed run's workspace, or `None` when it can.
    `protects_code`: the sandbox mounts the interpreter's code inside the workspace read-only
    (`Plan.protect`: a root supervisor's private mounts, no launcher)."""
    ws = os.path.realpath(workspace)
    for kept in _KEPT_FROM_WORKSPACES:
        if kept == ws or kept.startswith(ws.rstrip("/") + "/"):
            return (
                f"workspace {ws!r} cannot be sandboxed: it is or contains {kept}, which the "
                "sandbox keeps read-only or replaces with a private mount; use a directory of "
                "its own (one under /tmp works)"
            )
    inside = ("/usr/", "/etc/", "/bin/", "/sbin/", "/lib/", "/boot/", "/dev/", "/proc/", "/sys/")
    if ws.startswith(inside):
        return (
            f"workspace {ws!r} cannot be sandboxed: it lies in the system's own directories, "
            "which a sandboxed child must not write"
        )
    code = code_inside(ws)
    if ws in code or (code and not protects_code):
        fix = (
            ""
            if ws in code
            else (
                ", or run the supervisor as root (it then mounts that code read-only inside the "
                "workspace)"
            )
        )
        return (
            f"workspace {ws!r} cannot be sandboxed: it is or contains {code[0]}, code the "
            "supervisor and every new child run outside the sandbox (a child could change what "
            f"they import); use a directory that does not hold the virtualenv or tether itself{fix}"
        )
    return None


def unreadable_problem(
    command: Sequence[str],
    read_paths: Sequence[str] = (),
    *,
    as_uid: tuple[int, int] | None,
) -> str | None:
    """Why a sandboxed child could not read a path its command names (an agent file, a
    script) or a `read_paths` entry, or `None` when it can read them all. `as_uid`: the
    (uid, gid) a root supervisor's sandbox runs as, in private mounts that rebuild every
    directory on the way it cannot enter (so only the path's own mode matters); `None`: the
    child keeps this process's uid, and the whole path must be open to it."""
    named = [p for arg in command for p in _named_paths(arg)]
    named += [p for p in read_paths if os.path.isabs(p) and os.path.exists(p)]
    for path in dict.fromkeys(os.path.realpath(p) for p in named):
        try:
            st = os.stat(path)
        except OSError:
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        if as_uid is None:
            ok = os.access(path, os.R_OK | (os.X_OK if is_dir else 0))
            who = "this user"
        else:
            ok = _may_read(st, *as_uid, is_dir)
            who = f"the sandbox's uid {as_uid[0]}"
        if ok:
            continue
        what = "directory" if is_dir else "file"
        fix = f"chmod o+r{'x' if is_dir else ''} {shlex.quote(path)}"
        return (
            f"a sandboxed child cannot read the {what} {path} (mode {stat.S_IMODE(st.st_mode):o}, "
            f"owner uid {st.st_uid}): {who} may not {'list and enter' if is_dir else 'read'} "
            f"it. Make it readable ({fix}), move it where others may read it, or run with "
            "process isolation (--isolation process)"
        )
    return None


def sandbox_uid(
    sandbox_user: tuple[int, int] | None, launcher: object | None = None
) -> tuple[int, int] | None:
    """The (uid, gid) a sandboxed child runs as in private mounts (a root supervisor, no
    launcher that isolates the filesystem itself); `None`: it keeps this process's uid."""
    provides = getattr(launcher, "provides", None)
    if not probe_host().root or getattr(provides, "filesystem_isolation", False):
        return None
    return sandbox_user or (DEFAULT_SANDBOX_ID, DEFAULT_SANDBOX_ID)


def _may_read(st: os.stat_result, uid: int, gid: int, directory: bool) -> bool:
    """Whether `uid`/`gid` (no supplementary group) may read `st` (and search it, a
    directory) by its mode bits."""
    need = 0o5 if directory else 0o4
    if st.st_uid == uid:
        bits = st.st_mode >> 6
    elif st.st_gid == gid:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & need == need


def code_inside(ws: str) -> list[str]:
    """The directories of the interpreter's own import path (prefixes, standard library,
    site-packages, `.pth` directories, tether's package folders and their sources), as given
    and resolved, that the resolved workspace `ws` is or contains."""
    return [p for p in interpreter_code() if p == ws or p.startswith(ws.rstrip("/") + "/")]


def plan_for(
    level: str,
    *,
    command: Sequence[str],
    workspace: str | None,
    host: HostIsolation | None = None,
    sandbox_user: tuple[int, int] | None = None,
    read_paths: Sequence[str] = (),
    inside_launcher: bool = False,
    interpreter: bool = True,
    network: PrivateNetwork | None = None,
    workspace_read_only: bool = False,
    deny_paths: Sequence[str] = (),
    allow_git_config: bool = False,
    layer: str | None = None,
) -> Setup:
    """The plan for one child at `level`. `inside_launcher`: the sandbox is applied inside a
    launcher that made its own mount namespace and user (bwrap), so it adds Landlock, seccomp
    and no_new_privs only. `interpreter=False` leaves Python's own paths out (the probe).
    `network`: the listeners of the parent's the child may reach (a foreign agent's model
    gateway, a run's egress proxy: `PrivateNetwork`);
    `workspace_read_only`: the workspace is granted read only; `deny_paths`: directories the
    child must never reach (`ChildConfig.deny_paths`): covered by the private mounts where
    there are some, refused by `deny_problem` when the run is planned where there are not;
    `allow_git_config`: the child may write the workspace's `.git/config` and `.git/hooks`
    (else the sandbox refuses it, where the host lets it: `git_guard`); `layer`: a layered
    workspace's layer directory, mounted as an overlay over the workspace (`Plan.layer`: its
    writes never reach the workspace, so no git guard is needed there)."""
    if level != "sandbox":
        return Setup(Plan())
    host = host or probe_host()
    ws = os.path.realpath(workspace) if workspace else None
    base = _Sandbox(
        abi=host.landlock_abi,
        ws=ws,
        reads=_read_grants(command, ws, read_paths, interpreter),
        net=network.to_json() if network is not None else None,
        workspace_read_only=workspace_read_only,
        layer=layer,
    )
    if inside_launcher:
        return _inside_launcher(base)
    # bwrap's root is not one a user namespace can be made in: under it, no guard (above).
    guard = (
        git_guard(ws)
        if ws is not None
        and not allow_git_config
        and not workspace_read_only
        and host.git_unguarded is None
        and layer is None
        else []
    )
    if host.root:
        return _as_root(base, host, guard, sandbox_user, deny_paths)
    return _unprivileged(base, guard)


@dataclass(frozen=True)
class _Sandbox:
    """What every sandbox plan of one child starts from."""

    abi: int
    ws: str | None
    reads: list[str]
    net: dict[str, Any] | None
    workspace_read_only: bool
    layer: str | None


def _inside_launcher(base: _Sandbox) -> Setup:
    """Inside a launcher that made its own mount namespace and user (bwrap): Landlock,
    seccomp and no_new_privs only."""
    plan = Plan(
        "sandbox",
        base.abi,
        workspace=base.ws,
        reads=base.reads,
        writes=["/tmp", "/dev/shm"],
        home=PRIVATE_HOME,
        cwd=base.ws,
        network=base.net,
        workspace_read_only=base.workspace_read_only,
        # The launcher's own mounts are not sealed: only Landlock can tell sockets apart.
        local_sockets=base.net is None and base.abi >= landlock.RESOLVE_UNIX_ABI,
    )
    return Setup(plan, private_env("/tmp"))


def _as_root(
    base: _Sandbox,
    host: HostIsolation,
    guard: list[str],
    sandbox_user: tuple[int, int] | None,
    deny_paths: Sequence[str],
) -> Setup:
    """A root supervisor's: an unprivileged uid, private mounts that hide what is denied."""
    ws = base.ws
    uid, gid = sandbox_user or (DEFAULT_SANDBOX_ID, DEFAULT_SANDBOX_ID)
    owner = None
    if ws is not None:
        st = os.stat(ws)
        owner = (st.st_uid, st.st_gid)
    plan = Plan(
        "sandbox",
        base.abi,
        uid=uid,
        gid=gid,
        workspace=ws,
        owner=owner,
        reads=base.reads,
        writes=["/tmp", "/var/tmp", "/dev/shm"],
        private_mounts=True,
        home=PRIVATE_HOME,
        cwd=ws,
        network=base.net,
        workspace_read_only=base.workspace_read_only,
        protect=code_inside(ws) if ws is not None else [],
        local_sockets=base.net is None and host.local_sockets,
        hide=[d for d in _denied(deny_paths) if not (ws is not None and _under(ws, d))],
        git_guard=guard,
        layer=base.layer,
    )
    return Setup(plan, private_env("/tmp"))


def _unprivileged(base: _Sandbox, guard: list[str]) -> Setup:
    """Without root: a private directory of the child's own for its home and temporary files
    (removed by the setup's cleanup)."""
    private = tempfile.mkdtemp(prefix="tether-sandbox-")
    for sub in ("home", "tmp", "run"):
        os.mkdir(os.path.join(private, sub), 0o700)
    plan = Plan(
        "sandbox",
        base.abi,
        workspace=base.ws,
        reads=base.reads,
        writes=[private, "/dev/shm"],
        home=os.path.join(private, "home"),
        cwd=base.ws,
        network=base.net,
        workspace_read_only=base.workspace_read_only,
        local_sockets=base.net is None and base.abi >= landlock.RESOLVE_UNIX_ABI,
        git_guard=guard,
        layer=base.layer,
    )
    env = private_env(private)
    env["TMPDIR"] = os.path.join(private, "tmp")
    return Setup(plan, env, lambda: shutil.rmtree(private, ignore_errors=True))


_SEALER_HELPER = (
    "import ctypes, os\n"
    "if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:\n"
    "    raise SystemExit(1)\n"
    "os.write(1, b'u')\n"
    "os.read(0, 1)\n"
)
_sealer: list[int] = []


def sealer_fd() -> int | None:
    """An fd of `mounts.unmapped_userns()`'s namespace, made once per supervisor and kept: a
    root supervisor hands it to every exec'd child whose private mounts are sealed
    (`SpawnSpec.pass_fds`), which would otherwise fork a helper for it at each spawn. Made by
    a helper *process* (this one may have threads, so it never forks itself); `None` when it
    cannot be made (the child then makes its own, and says what failed)."""
    if _sealer:
        return _sealer[0]
    try:
        helper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _SEALER_HELPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None
    assert helper.stdin is not None and helper.stdout is not None
    try:
        if helper.stdout.read(1) != b"u":
            return None
        ident = f"{mounts.UNMAPPED_ID} {mounts.UNMAPPED_ID} 1\n"
        for name, text in (("setgroups", "deny"), ("uid_map", ident), ("gid_map", ident)):
            with open(f"/proc/{helper.pid}/{name}", "w") as f:
                f.write(text)
        fd = os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        helper.stdin.close()
        helper.stdout.close()
        helper.wait(timeout=TRIAL_SECONDS)
    _sealer.append(fd)
    return fd


def git_guard(workspace: str) -> list[str]:
    """The `.git` entries of `workspace` the sandbox guards (`Plan.git_guard`): its `.git`
    (directory or `gitdir:` file) and each submodule's git directory (`contain.gitdirs`).
    Nothing when there is no repository: a repository the child makes itself (`git init`) is
    the parent's watch's to report (`sensitiveChanges`), not the sandbox's to refuse."""
    return gitdirs.workspace_git_entries(workspace)


ISOLATION_ENV = "TETHER_ISOLATION"
"""Tells the child runtime it is sandboxed, so its tools mark denials as the sandbox's."""


def private_env(tmp: str) -> dict[str, str]:
    """What a sandboxed child's environment gets: its level, and HOME, TMPDIR and XDG_* in
    its private temp directory `tmp`."""
    home = PRIVATE_HOME if tmp == "/tmp" else os.path.join(tmp, "home")
    return {
        ISOLATION_ENV: "sandbox",
        "HOME": home,
        "TMPDIR": tmp,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "XDG_RUNTIME_DIR": PRIVATE_RUNTIME if tmp == "/tmp" else os.path.join(tmp, "run"),
    }


def merged_env(env: Mapping[str, str], setup: Setup, explicit: Mapping[str, str]) -> dict[str, str]:
    """The child's environment with the sandbox's variables, except those the caller set."""
    out = dict(env)
    for key, value in setup.env.items():
        if key not in explicit:
            out[key] = value
    return out


@dataclass
class Spawnable:
    """A child's command and plan, ready for a `SpawnSpec`."""

    argv: list[str]
    outer_plan: dict[str, object] | None
    """The plan the trampoline (or the zygote's fork) applies; `None` when the sandbox goes
    inside the launcher instead."""
    setup: Setup


def isolation_setup(
    level: str,
    *,
    command: Sequence[str],
    workspace: str | None,
    sandbox_user: tuple[int, int] | None = None,
    read_paths: Sequence[str] = (),
    launcher: object | None = None,
    network: PrivateNetwork | None = None,
    workspace_read_only: bool = False,
    deny_paths: Sequence[str] = (),
    allow_git_config: bool = False,
    layer: str | None = None,
) -> Spawnable:
    """The one place a child's isolation is decided: its plan (`plan_for`), and where it is
    applied. bwrap must be the outer layer (inside a Landlock domain it cannot set up its
    namespaces), so under a launcher that says `sandbox_inside`, the command becomes the
    trampoline with the plan, run by the launcher, and the outer trampoline applies none.
    The inner plan is reduced to Landlock, seccomp and no_new_privs only when the launcher
    isolates the filesystem itself (bwrap); `pidns` gets the whole plan, applied inside its
    namespace (the outer one would forbid the namespace to the shim)."""
    inside = bool(getattr(launcher, "sandbox_inside", False)) and level == "sandbox"
    provides = getattr(launcher, "provides", None)
    reduced = inside and bool(getattr(provides, "filesystem_isolation", False))
    setup = plan_for(
        level,
        command=command,
        workspace=workspace,
        sandbox_user=sandbox_user,
        read_paths=read_paths,
        inside_launcher=reduced,
        network=network,
        workspace_read_only=workspace_read_only,
        deny_paths=deny_paths,
        allow_git_config=allow_git_config,
        layer=None if reduced else layer,
    )
    if inside:
        config = config_word.encode({"plan": setup.plan.to_json()})
        in_place = trampoline_in_place(command, setup.plan.to_json())
        argv = trampoline_argv(str(TRAMPOLINE), config, command, in_place=in_place)
        return Spawnable(argv, None, setup)
    plan = setup.plan.to_json() if setup.plan.sandboxed else None
    return Spawnable(list(command), plan, setup)
