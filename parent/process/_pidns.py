"""PID-namespace shim: runs a child's command in a PID namespace of its own, so that nothing the
command starts can outlive it, whoever kills whom.

Run as `python -I -S _pidns.py [--user] -- ARGV...` (the `pidns` launcher puts it after the
trampoline). Standard library only, like the trampoline. Three processes:

    shim  (this file, the supervisor's direct child, outside the namespace)
     └─ init   pid 1 of the new namespace: forwards signals, reaps, reports the status
         └─ command   pid 2: the real child

Why an init of our own rather than exec'ing the command as pid 1: the kernel protects a
namespace's init from every signal it has no handler for, its own included. A command that is
pid 1 would ignore the ladder's SIGTERM, and its own `abort()` would end as SIGSEGV (glibc's
last resort) instead of SIGABRT. Here the command is an ordinary process, and the shim dies
exactly as the command did (the same exit code, or the same signal), so the supervisor
classifies it as if there were no namespace at all.

Why it cannot leak: init has PR_SET_PDEATHSIG=SIGKILL on the shim, and when a namespace's init
dies the kernel SIGKILLs every process in the namespace. A setsid/double-fork daemon is still
in the namespace. So the SIGKILL of the shim, of the supervisor's thread (the trampoline's
PDEATHSIG), of the whole host, ends the whole tree, with no cooperation from anyone.

`--user` also makes a user namespace (the caller mapped to root inside it), which lets a
process without CAP_SYS_ADMIN make the PID namespace; as root it is not needed.

The namespace comes with a mount namespace holding a /proc of its own (`_mount_proc`). At the
sandbox isolation level the command is a second trampoline that applies the sandbox inside
the namespace: the sandbox's seccomp filter forbids new namespaces, so it cannot come first.

When the command exits, init reports its wait status and exits; the kernel kills whatever the
command left behind in the namespace.
"""

import ctypes
import os
import signal
import struct
import sys

EXEC_FAILED = "tether-trampoline: exec failed:"
"""The trampoline's marker: the supervisor reports the line as `spawn_failed`."""
PARENT_GONE = 125
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNS = 0x00020000
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCONT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_STATUS = struct.Struct("=i")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _fail(what: str, errno: int) -> None:
    os.write(2, f"{EXEC_FAILED} {what}: {os.strerror(errno)}\n".encode())
    os._exit(127)


def _unshare(user: bool) -> None:
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWPID | CLONE_NEWNS | (CLONE_NEWUSER if user else 0)
    libc = _libc()
    if libc.unshare(flags) != 0:
        _fail("cannot make a PID namespace (unshare)", ctypes.get_errno())
    if user:
        for path, text in (
            ("/proc/self/setgroups", "deny"),
            ("/proc/self/uid_map", f"0 {uid} 1"),
            ("/proc/self/gid_map", f"0 {gid} 1"),
        ):
            try:
                with open(path, "w") as f:
                    f.write(text)
            except OSError as exc:
                _fail(f"cannot map the user namespace ({path})", exc.errno or 1)


def _quiet_stdio() -> None:
    """The command keeps the wire; the shim and init must not hold its ends (stdin's reader,
    stdout's writer) longer than the command does."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def _die_like(status: int) -> None:
    """End this process the way `status` says its child ended."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is not to terminate
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _mount_proc() -> None:
    """A /proc of the namespace's own, in the mount namespace made with it: the command sees
    its own processes only, and pids read in /proc mean what `fork` returned (the sandbox's
    id-mapping helper writes /proc/PID/uid_map by the pid it forked). Best effort: where the
    kernel refuses (a masked /proc in an unprivileged container) the command keeps the
    host's, as without the namespace."""
    libc = _libc()
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return  # never mount over a /proc that propagates back to the host
    libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def _init(command: list[str], report: int, lifeline: int) -> None:
    """Pid 1 of the namespace: start the command, forward signals to the namespace, reap, and
    report the command's wait status."""
    if _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(PARENT_GONE)
    os.set_blocking(lifeline, False)
    try:
        if os.read(lifeline, 1) == b"":
            os._exit(PARENT_GONE)  # the shim died before the death signal was armed
    except BlockingIOError:
        pass
    os.close(lifeline)
    _mount_proc()
    child = os.fork()
    if child == 0:
        os.close(report)
        for sig in (*FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvpe(command[0], command, os.environ)
        except OSError as exc:
            _fail(command[0], exc.errno or 1)
    _quiet_stdio()

    def forward(sig: int, frame: object) -> None:
        try:
            os.kill(-1, sig)  # every process of the namespace but init
        except OSError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)  # we are init: every orphan is ours to reap
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            os.write(report, _STATUS.pack(status))
            os._exit(0)


def main(argv: list[str]) -> None:
    sep = argv.index("--")
    user = "--user" in argv[1:sep]
    command = argv[sep + 1 :]
    # An ignored SIGCHLD survives exec and makes the kernel reap children itself, so a wait
    # would never see how they died (a crash would read as exit 0).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _unshare(user)
    report_r, report_w = os.pipe()
    life_r, life_w = os.pipe()
    init = os.fork()  # the first child after unshare(CLONE_NEWPID) is the namespace's pid 1
    if init == 0:
        os.close(report_r)
        os.close(life_w)
        _init(command, report_w, life_r)
    os.close(report_w)
    os.close(life_r)
    _quiet_stdio()

    def forward(sig: int, frame: object) -> None:
        try:
            os.kill(init, sig)
        except OSError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    _, init_status = os.waitpid(init, 0)
    got = os.read(report_r, _STATUS.size)
    _die_like(_STATUS.unpack(got)[0] if len(got) == _STATUS.size else init_status)


if __name__ == "__main__":
    main(sys.argv)
