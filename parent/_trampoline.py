"""Trusted trampoline: the first code that runs in a new child process, before it execs.

Run as `python -I -S _trampoline.py CONFIG_JSON -- ARGV...`. It imports only the standard
library (no site, no tether) so it is quick and cannot be influenced by the child's
environment. Order matters:

0. join the child's cgroups (so everything from here on, its descendants included, is counted
   and contained);
1. PR_SET_PDEATHSIG=SIGKILL, so the child dies with the thread that spawned it;
2. check getppid() is still the supervisor: if the supervisor died between fork and prctl,
   the death signal was never armed, so exit rather than run unsupervised;
3. apply resource limits (core dumps always off);
4. exec the real command. If exec fails, exit 127 with a marker line the supervisor reads.

Doing this here rather than in `preexec_fn` keeps the supervisor's own process free of
post-fork Python code (unsafe with threads) and lets any language's child get the same setup.
"""

import json
import os
import resource
import signal
import sys

EXEC_FAILED = "tether-trampoline: exec failed:"
PARENT_GONE = 125


def _prctl_pdeathsig(sig: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    if libc.prctl(pr_set_pdeathsig, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def main(argv: list[str]) -> None:
    sep = argv.index("--")
    config = json.loads(argv[1])
    command = argv[sep + 1 :]
    for procs in config.get("cgroup_procs", []):
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    if config.get("pdeathsig"):
        _prctl_pdeathsig(int(config["pdeathsig"]))
        if os.getppid() != int(config["ppid"]):
            os._exit(PARENT_GONE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, (soft, hard) in config.get("rlimits", {}).items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    # Python ignores SIGPIPE and SIGXFSZ for itself; ignored signals survive exec, so put them
    # back, or a child writing past its file size limit would never be told.
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvpe(command[0], command, os.environ)
    except OSError as exc:
        os.write(2, f"{EXEC_FAILED} {command[0]}: {exc.strerror}\n".encode())
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv)
