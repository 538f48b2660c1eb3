"""Launchers: argv prefixes that run a child somewhere else, each declaring what it provides.

The trampoline (cgroup, PDEATHSIG, rlimits) runs first and then execs the launcher's argv, so a
launcher process is the supervisor's direct child and everything it starts is inside the
child's cgroup on this host. What a launcher adds on top is in its `Provides`:

- `local`: nothing (the command as is);
- `bwrap`: a bubblewrap sandbox: its own user namespace with every capability dropped, no
  network (`--unshare-net`), pid, IPC, UTS and cgroup namespaces, a pid namespace that dies
  with bwrap, the workspace the only writable bind, system directories, named /etc entries and
  Python's own paths read-only (never the supervisor's working directory), a private /tmp,
  and exactly our scrubbed environment (`--clearenv` + `--setenv`). It is the outer layer:
  at the sandbox isolation level the trampoline runs *inside* it and adds Landlock, seccomp
  and no_new_privs there (inside a Landlock domain bwrap could not set up its namespaces);
- `pidns`: a PID namespace of its own (`_pidns.py`), so nothing the command starts outlives
  it, whoever is killed (the default for children placed on other nodes, `placement/`);
- `prlimit`, `setpriv`: util-linux wrappers (rlimits by the kernel; no new privileges);
- `ssh`, `docker`, `kubectl`: the child runs on another host or in a container; signals from
  here reach only the local client, so teardown is the EOF lifeline alone
  (`eof_teardown_only`): closing the child's stdin must end it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tether.contain.plan import ETC_READ
from tether.parent.process.classify import explaining_line
from tether.parent.process.limits import Limits


@dataclass(frozen=True)
class Provides:
    """What a launcher enforces by itself, beyond the tier's containment on this host."""

    network_isolation: bool = False
    filesystem_isolation: bool = False
    limits: frozenset[str] = frozenset()
    """Limits (`memory`, `cpu`, `processes`, `open_files`, `file_size`) the launcher enforces."""
    eof_teardown_only: bool = False
    """Signals cannot reach the real child (remote host, container): only EOF on stdin ends it."""


@dataclass(frozen=True)
class LaunchContext:
    command: Sequence[str]
    env: Mapping[str, str]
    """The child's full scrubbed environment (tree marker included)."""
    explicit_env: Mapping[str, str]
    """Only the values the caller set (`ChildConfig.env`): what a remote side gets."""
    workspace: str
    limits: Limits
    read_paths: Sequence[str] = ()
    """More paths the child may read (`ChildConfig.read_paths`)."""


@dataclass(frozen=True)
class Launcher:
    name: str = "local"
    provides: Provides = Provides()

    def argv(self, ctx: LaunchContext) -> list[str]:
        return list(ctx.command)

    @property
    def program(self) -> str | None:
        """The launcher's own executable, which must exist on this host (`None`: none)."""
        return None

    @property
    def answers(self) -> list[str] | None:
        """A command that succeeds only when what the launcher needs beyond its program (a
        daemon, a cluster) answers; `None`: nothing to ask (`readiness`)."""
        return None


@dataclass(frozen=True)
class Local(Launcher):
    pass


_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass(frozen=True)
class Bwrap(Launcher):
    name: str = "bwrap"
    provides: Provides = Provides(network_isolation=True, filesystem_isolation=True)
    network: bool = False
    """Keep the host's network (no `--unshare-net`)."""
    read_only: Sequence[str] = ()
    """More paths to bind read-only."""
    binary: str = "bwrap"
    sandbox_inside: bool = True
    """The sandbox isolation level is applied inside bwrap (see `isolation_setup`)."""

    @property
    def program(self) -> str | None:
        return self.binary

    def argv(self, ctx: LaunchContext) -> list[str]:
        out = [
            self.binary,
            "--die-with-parent",
            "--new-session",
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
        ]
        if not self.network:
            out.append("--unshare-net")
        out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
        for d in _SYSTEM_DIRS:
            p = Path(d)
            if p.is_symlink():
                out += ["--symlink", os.readlink(p), d]
            elif p.is_dir():
                out += ["--ro-bind", d, d]
        for name in ETC_READ:
            p = Path("/etc", name)
            if p.is_symlink():
                out += ["--symlink", os.readlink(p), str(p)]
            elif p.exists():
                out += ["--ro-bind", str(p), str(p)]
        bound: list[str] = []
        for path in self._read_only_paths(ctx):
            if not any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound):
                bound.append(path)
        for path in sorted(bound):
            out += ["--ro-bind", path, path]
        out += ["--bind", ctx.workspace, ctx.workspace, "--chdir", ctx.workspace, "--clearenv"]
        for k, v in sorted(ctx.env.items()):
            out += ["--setenv", k, v]
        return [*out, "--", *ctx.command]

    def _read_only_paths(self, ctx: LaunchContext) -> list[str]:
        """What a sandboxed child is granted to read (the interpreter's prefixes, its import
        path as `python -I` sees it, tether's own folders, absolute paths named in the
        command) and `read_only`, outside the system directories already bound; never the
        supervisor's working directory or other entries of its `sys.path`."""
        from tether.parent.process.isolation import command_reads, interpreter_reads

        paths = [
            *interpreter_reads(),
            *command_reads(ctx.command),
            *ctx.read_paths,
            *self.read_only,
        ]
        out = []
        for raw in paths:
            if not raw or not os.path.exists(raw):
                continue
            for path in (os.path.normpath(raw), str(Path(raw).resolve())):
                system = any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIRS)
                if not system and path != "/" and not path.startswith("/proc/"):
                    out.append(path)
        return sorted(set(out), key=len)


_RLIMIT_FLAGS = {
    "RLIMIT_DATA": "--data",
    "RLIMIT_CPU": "--cpu",
    "RLIMIT_NOFILE": "--nofile",
    "RLIMIT_FSIZE": "--fsize",
    "RLIMIT_NPROC": "--nproc",
}


@dataclass(frozen=True)
class Prlimit(Launcher):
    name: str = "prlimit"
    provides: Provides = Provides(
        limits=frozenset({"memory", "cpu", "processes", "open_files", "file_size"})
    )

    @property
    def program(self) -> str | None:
        return "prlimit"

    def argv(self, ctx: LaunchContext) -> list[str]:
        out = ["prlimit", "--core=0"]
        for name, (soft, hard) in sorted(ctx.limits.rlimits().items()):
            out.append(f"{_RLIMIT_FLAGS[name]}={soft}:{hard}")
        return [*out, "--", *ctx.command]


@dataclass(frozen=True)
class Setpriv(Launcher):
    name: str = "setpriv"
    user: str | None = None
    """Run as this user (and its group), with supplementary groups cleared."""

    @property
    def program(self) -> str | None:
        return "setpriv"

    def argv(self, ctx: LaunchContext) -> list[str]:
        out = ["setpriv", "--no-new-privs"]
        if self.user is not None:
            out += [f"--reuid={self.user}", f"--regid={self.user}", "--clear-groups"]
        return [*out, "--", *ctx.command]


PIDNS_SHIM = Path(__file__).with_name("_pidns.py")


@dataclass(frozen=True)
class Pidns(Launcher):
    """The command in a PID namespace of its own (`_pidns.py`): whatever kills the launcher
    process, the kernel kills everything the command started. `user`: also a user namespace,
    so no privilege is needed (`None`: only when not root)."""

    name: str = "pidns"
    user: bool | None = None
    sandbox_inside: bool = True
    """The sandbox is applied inside the namespace, by a second trampoline the shim's command
    runs: the sandbox's seccomp filter forbids new namespaces, so applied outside it would
    forbid the shim its own (see `isolation_setup`)."""

    def argv(self, ctx: LaunchContext) -> list[str]:
        user = self.user if self.user is not None else os.geteuid() != 0
        flags = ["--user"] if user else []
        return [sys.executable, "-I", "-S", str(PIDNS_SHIM), *flags, "--", *ctx.command]


def _remote_command(ctx: LaunchContext) -> str:
    env = [f"{k}={v}" for k, v in sorted(ctx.explicit_env.items())]
    command = ["env", *env, *ctx.command] if env else list(ctx.command)
    return f"cd {shlex.quote(ctx.workspace)} && exec {shlex.join(command)}"


@dataclass(frozen=True)
class Ssh(Launcher):
    name: str = "ssh"
    provides: Provides = Provides(eof_teardown_only=True)
    host: str = ""
    program_argv: Sequence[str] = ("ssh",)
    """The ssh client (a test can stand in a relay)."""
    options: Sequence[str] = ()

    @property
    def program(self) -> str | None:
        return self.program_argv[0]

    def argv(self, ctx: LaunchContext) -> list[str]:
        # -T: no tty (bytes pass through untouched); the remote command is one shell string.
        return [
            *self.program_argv,
            "-T",
            "-o",
            "BatchMode=yes",
            *self.options,
            "--",
            self.host,
            _remote_command(ctx),
        ]


@dataclass(frozen=True)
class Docker(Launcher):
    name: str = "docker"
    provides: Provides = Provides(
        network_isolation=True,
        filesystem_isolation=True,
        limits=frozenset({"memory", "processes", "cpu"}),
        eof_teardown_only=True,
    )
    image: str = ""
    network: bool = False
    binary: str = "docker"

    @property
    def program(self) -> str | None:
        return self.binary

    @property
    def answers(self) -> list[str] | None:
        # Asks the daemon for its version: fails at once when there is no daemon to ask.
        return [self.binary, "version", "--format", "{{.Server.Version}}"]

    def argv(self, ctx: LaunchContext) -> list[str]:
        out = [self.binary, "run", "-i", "--rm", "--init"]
        if not self.network:
            out += ["--network", "none"]
        lim = ctx.limits
        if lim.memory_bytes is not None:
            out += ["--memory", str(lim.memory_bytes), "--memory-swap", str(lim.memory_bytes)]
        if lim.processes is not None:
            out += ["--pids-limit", str(lim.processes)]
        out += ["-v", f"{ctx.workspace}:{ctx.workspace}", "-w", ctx.workspace]
        for k in sorted(ctx.explicit_env):
            out += ["-e", k]  # the value comes from docker's own environment, not argv
        return [*out, self.image, *ctx.command]


@dataclass(frozen=True)
class Kubectl(Launcher):
    name: str = "kubectl"
    provides: Provides = Provides(
        filesystem_isolation=True, limits=frozenset({"memory", "cpu"}), eof_teardown_only=True
    )
    image: str = ""
    pod: str = "tether-child"
    cpus: float | None = None

    @property
    def program(self) -> str | None:
        return "kubectl"

    @property
    def answers(self) -> list[str] | None:
        # The API server of the current context, asked with the same bound as the whole check.
        return ["kubectl", "version", f"--request-timeout={READINESS_SECONDS:g}s"]

    def argv(self, ctx: LaunchContext) -> list[str]:
        out = ["kubectl", "run", self.pod, "-i", "--rm", "--restart=Never", "--quiet"]
        out.append(f"--image={self.image}")
        for k, v in sorted(ctx.explicit_env.items()):
            out.append(f"--env={k}={v}")
        limits: dict[str, str] = {}
        if ctx.limits.memory_bytes is not None:
            limits["memory"] = str(ctx.limits.memory_bytes)
        if self.cpus is not None:
            limits["cpu"] = f"{self.cpus:g}"
        if limits:
            override = {
                "spec": {
                    "containers": [
                        {
                            "name": self.pod,
                            "image": self.image,
                            "stdin": True,
                            "args": list(ctx.command),
                            "resources": {"limits": limits},
                        }
                    ]
                }
            }
            out.append(f"--overrides={json.dumps(override, sort_keys=True)}")
        return [*out, "--", *ctx.command]


READINESS_SECONDS = 1.0
"""How long `readiness` waits for a launcher's daemon or cluster to answer."""


def readiness(launcher: Launcher) -> str | None:
    """Why `launcher` cannot run a child here, or `None` when it can: its program is on PATH
    and, for a launcher that needs a daemon or a cluster, that answers within
    `READINESS_SECONDS`."""
    program = launcher.program
    if program is not None and shutil.which(program) is None:
        return f"{program} not installed"
    probe = launcher.answers
    if probe is None:
        return None
    shown = shlex.join(probe)
    try:
        # A session of its own: on timeout the whole group goes, helpers holding the pipes
        # included, so the wait for its output ends with it.
        proc = subprocess.Popen(
            probe,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        return f"`{shown}` could not run: {exc.strerror or exc}"
    try:
        out, err = proc.communicate(timeout=READINESS_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"`{shown}` did not answer within {READINESS_SECONDS:g}s"
    if proc.returncode != 0:
        why = explaining_line(err) or explaining_line(out)
        return f"`{shown}` failed: {why or f'exit status {proc.returncode}'}"
    return None


@dataclass(frozen=True)
class LauncherKind:
    """One entry of the launcher registry: how a launcher is named and built."""

    name: str
    summary: str
    make: Callable[[str], Launcher]
    """Build the launcher from the part after `NAME:` (empty for a launcher without one)."""
    argument: str | None = None
    """What follows `NAME:` (`HOST`, `IMAGE`), for launchers that need it."""

    @property
    def usage(self) -> str:
        return f"{self.name}:{self.argument}" if self.argument else self.name


LAUNCHERS: dict[str, LauncherKind] = {
    k.name: k
    for k in (
        LauncherKind("local", "run the command as is", lambda _: Local()),
        LauncherKind("bwrap", "bubblewrap sandbox, no network", lambda _: Bwrap()),
        LauncherKind(
            "bwrap-net",
            "bubblewrap sandbox with the host's network",
            lambda _: Bwrap(
                name="bwrap-net", network=True, provides=Provides(filesystem_isolation=True)
            ),
        ),
        LauncherKind(
            "pidns", "a PID namespace of its own: nothing outlives the command", lambda _: Pidns()
        ),
        LauncherKind("prlimit", "util-linux prlimit sets the rlimits", lambda _: Prlimit()),
        LauncherKind("setpriv", "util-linux setpriv --no-new-privs", lambda _: Setpriv()),
        LauncherKind("ssh", "run on HOST over ssh (EOF lifeline)", lambda a: Ssh(host=a), "HOST"),
        LauncherKind(
            "docker", "docker run -i --rm IMAGE, no network", lambda a: Docker(image=a), "IMAGE"
        ),
        LauncherKind("kubectl", "kubectl run -i --rm IMAGE", lambda a: Kubectl(image=a), "IMAGE"),
    )
}
"""Every launcher by name: what `resolve_launcher`, `tether run --launcher` and `tether doctor`
read."""


def launcher_usages() -> list[str]:
    """How each launcher is written on the command line (`local`, `ssh:HOST`, ...)."""
    return [k.usage for k in LAUNCHERS.values()]


def resolve_launcher(spec: str | Launcher) -> Launcher:
    """A launcher from its name (`local`, `bwrap`, `ssh:HOST`, `docker:IMAGE`, ...)."""
    if isinstance(spec, Launcher):
        return spec
    name, _, arg = spec.partition(":")
    kind = LAUNCHERS.get(name)
    if kind is not None and bool(arg) == (kind.argument is not None):
        return kind.make(arg)
    raise ValueError(f"launcher {spec!r}: expected one of {', '.join(launcher_usages())}")


def launcher_name(spec: str | Launcher) -> str:
    """How a result names its launcher: the spec as given (`bwrap-net`, `ssh:HOST`), or a
    `Launcher` object's name."""
    return spec if isinstance(spec, str) else spec.name
