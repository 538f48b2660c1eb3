"""Trusted trampoline: the first code that runs in a new child process, before it execs.

Run as `python -I -S trampoline.py CONFIG -- ARGV...` (CONFIG: `argv.py`). It imports only
the standard library and its sibling modules of `tether.contain` (no site, so nothing the child's
environment or site-packages holds can influence it), runs the contained-exec sequence
(`sequence.py`: cgroups, death signal, rlimits, signals, and the sandbox the plan asks for),
then execs the command. If exec or the sandbox fails, it exits 127 with a marker line the
supervisor reads.

Doing this here rather than in `preexec_fn` keeps the supervisor's own process free of
post-fork Python code (unsafe with threads), applies the sandbox while the process has a
single thread (Landlock and seccomp are per thread), and gives any language's child the same
setup.
"""

import os
import sys

# Without site-packages on the path, find our siblings by where this file is: the directory
# holding `tether/` (site-packages for a wheel, the editable install's link tree for a strict
# editable one: `__file__` is not resolved, so the link tree is what we see).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tether.contain import argv as config_word  # noqa: E402
from tether.contain.plan import Plan  # noqa: E402
from tether.contain.sequence import EXEC_FAILED, SandboxError, contain  # noqa: E402


def main(argv: list[str]) -> None:
    sep = argv.index("--")
    config = config_word.decode(argv[1])
    command = argv[sep + 1 :]
    try:
        contain(
            cgroup_procs=config.get("cgroup_procs", []),
            ppid=int(config["ppid"]) if config.get("pdeathsig") else None,
            rlimits=config.get("rlimits", {}),
            for_exec=True,
            plan=Plan.from_json(config.get("plan")),
        )
    except SandboxError as exc:
        os.write(2, f"{EXEC_FAILED} {command[0]}: {exc}\n".encode())
        os._exit(127)
    try:
        os.execvpe(command[0], command, os.environ)
    except OSError as exc:
        os.write(2, f"{EXEC_FAILED} {command[0]}: {exc.strerror}\n".encode())
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv)
