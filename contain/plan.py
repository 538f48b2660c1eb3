"""The plan: what a sandboxed child may see and do, computed by the parent, applied by the
contained-exec sequence (`sequence.py`) in the new process.

A plan is plain JSON (it travels in the trampoline's argv and the zygote's spawn request), so
what a child was granted can be logged, compared and tested without starting one. The parent
builds it (`tether.parent.process.isolation.plan_for`); this module holds its shape and the
fixed part of the policy: the system paths every sandboxed child may read.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

LEVELS = ("sandbox", "process")
"""Isolation levels, strongest first."""

DEFAULT_SANDBOX_ID = 2_147_000_000
"""The uid and gid a root supervisor's sandboxed children run as, unless configured: a number
no distribution, user manager or container runtime hands out by default (system accounts
0-999, people 1000-60000, systemd's dynamic users 61184-65519, nobody 65534, subordinate id
ranges from 100000 in blocks of 65536), below 2^31 so tools that keep ids in a signed int
show it correctly. Owning nothing on the host, it can change nothing by plain permissions
outside the workspace (whose idmapping lends it the owner's files). Not `nobody`: other
daemons run as nobody, and the sandbox must not be able to signal or trace them."""

SYSTEM_READ = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/sys/devices/system/cpu",
)
"""Read and execute: programs, libraries, and the process's own view of the kernel (/proc:
other processes' secrets there are closed by ptrace access checks, not by Landlock)."""

ETC_READ = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ld.so.preload",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "gai.conf",
    "resolv.conf",
    "protocols",
    "services",
    "passwd",
    "group",
    "localtime",
    "timezone",
    "alternatives",
    "gitconfig",
    "mime.types",
    "magic",
    "magic.mime",
    "os-release",
    "lsb-release",
    "debian_version",
    "inputrc",
    "terminfo",
    "locale.alias",
    "locale.conf",
    "python3",
    f"python3.{sys.version_info[1]}",
)
"""Entries of /etc a child may read, by name: never /etc itself (Landlock cannot carve
exceptions, and /etc holds shadow, ssh host keys, pip and npm credentials)."""

DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
"""Device files a child may read and write; no other device is reachable."""

PRIVATE_HOME = "/tmp/home"
PRIVATE_RUNTIME = "/tmp/run"


def system_reads() -> list[str]:
    return [*SYSTEM_READ, *(f"/etc/{name}" for name in ETC_READ)]


_FIELDS = (
    "level",
    "abi",
    "uid",
    "gid",
    "workspace",
    "owner",
    "reads",
    "writes",
    "devices",
    "private_mounts",
    "home",
    "cwd",
    "seccomp",
    "network",
    "workspace_read_only",
    "protect",
    "local_sockets",
    "git_guard",
    "hide",
    "layer",
)


class Plan:
    """One child's sandbox. `level == "process"` means: no sandbox at all.

    A plain class rather than a dataclass: the trampoline imports it, and `dataclasses` would
    add ~10 ms to every cold spawn."""

    __slots__ = _FIELDS

    def __init__(
        self,
        level: str = "process",
        abi: int = 0,
        uid: int | None = None,
        gid: int | None = None,
        workspace: str | None = None,
        owner: tuple[int, int] | None = None,
        reads: Sequence[str] = (),
        writes: Sequence[str] = (),
        devices: Sequence[str] = DEVICES,
        private_mounts: bool = False,
        home: str | None = None,
        cwd: str | None = None,
        seccomp: bool = True,
        network: dict[str, Any] | None = None,
        workspace_read_only: bool = False,
        protect: Sequence[str] = (),
        local_sockets: bool = False,
        git_guard: Sequence[str] = (),
        hide: Sequence[str] = (),
        layer: str | None = None,
    ) -> None:
        self.level = level
        self.abi = abi
        """The Landlock ABI the domain is built for (the kernel's, at most `MAX_ABI`)."""
        self.uid = uid
        """Run as this uid/gid (a root supervisor); `None`: keep the supervisor's."""
        self.gid = gid
        self.workspace = workspace
        """Read/write; with `owner`, bind-mounted idmapped so `uid` owns what `owner` owns."""
        self.owner = tuple(owner) if owner is not None else None
        """The workspace's on-disk (uid, gid)."""
        self.reads = list(reads)
        """Read and execute: system paths, the interpreter, the import path, the command."""
        self.writes = list(writes)
        """Read/write besides the workspace: the private temp directories."""
        self.devices = list(devices)
        self.private_mounts = private_mounts
        """A private mount namespace: private /tmp, /var/tmp, /dev/shm; hidden home dirs."""
        self.home = home
        """A directory to create for HOME (owned by `uid`), inside the private temp dir."""
        self.cwd = cwd
        self.seccomp = seccomp
        self.network = dict(network) if network else None
        """`None`: no network at all (the default). For a child that must reach listeners
        the parent serves (a foreign agent's model gateway, a run's egress proxy):
        `{"ports": [P, ...], "channel": FD}` — a private network namespace whose only
        listeners are sockets on 127.0.0.1 at those ports, made inside and sent to the parent
        over the inherited UNIX socket FD (`netns.py`); without `channel` (a supervisor that
        cannot make one), the host's network with TCP connect to those ports only. Either way
        the seccomp filter's `inet` variant and a Landlock rule per port."""
        self.workspace_read_only = workspace_read_only
        """The workspace is granted read only (a foreign agent in explore mode: its own
        tools must not write there either)."""
        self.protect = list(protect)
        """Directories inside the workspace mounted read-only over it (private mounts only):
        the interpreter's import path and tether's own code, which the supervisor imports and
        every new child's trampoline runs outside the sandbox."""
        self.local_sockets = local_sockets
        """The child may `connect` to UNIX sockets: those the run binds itself (in the
        workspace, its private temp dirs) are reachable, and no other is — the private mounts
        are sealed (`mounts.py`), or Landlock handles socket resolution (ABI 9), and abstract
        sockets are scoped to the domain (ABI 6). `False`: `connect` is refused outright
        (`seccomp.py`). `sequence.py` checks the plan can keep that promise."""
        self.git_guard = list(git_guard)
        """`.git` entries of the workspace (relative paths: `.git`, `.git/modules/NAME`) whose
        writes the sandbox refuses (`mounts.guard_git`): a git directory becomes a mount of its
        own (it cannot be renamed or replaced) with `config` and `hooks` mounted read-only
        over themselves; a `.git` file (a pointer to the git directory) is mounted read-only.
        Done in the private mount namespace as root, in a user namespace of its own without
        root (`sequence._enter`)."""
        self.hide = list(hide)
        """Directories covered by an empty, read-only mount (private mounts only): the
        session store's, which no grant may reach, whatever the layout."""
        self.layer = layer
        """A layered workspace: the parent's layer directory (`upper/`, `work/`), mounted as
        an overlay over the workspace (`tether.contain.layer`): as root in the private mount
        namespace, without root in a user namespace of the child's own. With
        `workspace_read_only`, a read-only view of the layer."""

    @property
    def sandboxed(self) -> bool:
        return self.level == "sandbox"

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Plan:
        if not data:
            return cls()
        return cls(**{k: v for k, v in data.items() if k in _FIELDS})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return f"Plan({', '.join(f'{k}={getattr(self, k)!r}' for k in _FIELDS)})"
