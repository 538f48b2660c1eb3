"""Trusted trampoline: the first code that runs in a new child process.

Run as `python -I -S trampoline.py CONFIG -- ARGV...` (CONFIG: `argv.py`). It imports only
the standard library and its sibling modules of `tether.contain` (no site, so nothing the child's
environment or site-packages holds can influence it), runs the contained-exec sequence
(`sequence.py`: cgroups, death signal, rlimits, signals, and the sandbox the plan asks for),
then becomes the command. If that or the sandbox fails, it exits 127 with a marker line the
supervisor reads.

Doing this here rather than in `preexec_fn` keeps the supervisor's own process free of
post-fork Python code (unsafe with threads), applies the sandbox while the process has a
single thread (Landlock and seccomp are per thread), and gives any language's child the same
setup.

Becoming the command is an exec, except for tether's own child: the parent starts the
trampoline for `sys.executable -I -m tether.child ARGS` as `python -I trampoline.py ...`
(without `-S`: the flags that command runs with), and this process then turns into that child
in place, as a zygote's forked child does (`tether.child.zygote`), instead of paying a second
interpreter start (≈ 10 ms of a cold spawn's ≈ 80). The child cannot tell the difference: the
interpreter's flags are the ones the command names (so `multiprocessing` starts its workers
with them), the sequence puts the signal dispositions and mask back to a fresh interpreter's
(`for_exec=False`), the import path is the one a `-I` start builds, and the module runs as
`-m` runs it, under the same limits and sandbox as an exec'd one would (a test compares the
two). What runs before the sequence is then also site's processing of site-packages (`.pth`
files): the same installation the supervisor's own interpreter processed at its start, and the
parent starts a trampoline this way only when no directory of that import path lies where the
child may write (`tether.contain.inplace`); otherwise the child is exec'd and site runs inside
its sandbox. `/proc/<pid>/cmdline` stays the trampoline's, CONFIG
included: nothing secret travels there (the cgroup paths, limits and plan are the child's to
read in /proc anyway). A trampoline started with `-S` always execs. An unsandboxed child run in
place joins its cgroups while it imports its runtime (`inplace.join_meanwhile`).
"""

import gc
import os
import sys

# A child this process becomes in place imports its runtime with the collector off, as
# `python -m tether.child` does (see `tether.child.entry._end_startup`); an exec resets it.
gc.disable()

# Started with `-S` (no site, so no site-packages and no `.pth` import hook on the path), we
# find our siblings by where this file is, whatever the installation looks like around it: a
# wheel's `site-packages/tether/contain/`, a strict editable install's link tree, or a default
# editable install (setuptools' import finder, which only a `.pth` installs) whose sources
# are the checkout's own `contain/`, beside no `tether/` at all. `tether.contain` is made the
# package of this directory, under an empty `tether`: nothing else is importable through it,
# and the import path stays as `-I -S` made it. Such a trampoline always execs. Started with
# site (it will become tether's own child in place), the installation's own `tether` is
# imported, as the child will import it.
if sys.flags.no_site and "tether.contain" not in sys.modules:
    _contain = type(sys)("tether.contain")
    _contain.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    _contain.__package__ = "tether.contain"
    _tether = type(sys)("tether")
    _tether.__path__ = []
    _tether.contain = _contain  # type: ignore[attr-defined]
    sys.modules.setdefault("tether", _tether)
    sys.modules["tether.contain"] = _contain

from tether.contain import argv as config_word  # noqa: E402
from tether.contain.inplace import OWN_CHILD, join_meanwhile, runs_in_place  # noqa: E402
from tether.contain.plan import Plan  # noqa: E402
from tether.contain.sequence import EXEC_FAILED, SandboxError, contain  # noqa: E402


def in_place(command: list[str]) -> bool:
    """Become `command` here: tether's own child, and this interpreter started with its flags."""
    return bool(sys.flags.isolated and not sys.flags.no_site) and runs_in_place(command)


def main(argv: list[str]) -> None:
    sep = argv.index("--")
    config = config_word.decode(argv[1])
    command = argv[sep + 1 :]
    here = in_place(command)
    plan = Plan.from_json(config.get("plan"))
    procs = config.get("cgroup_procs", [])
    if here and not (plan is not None and plan.sandboxed):
        # Joined while the runtime imports, waited for before it serves (`inplace.joined`).
        join_meanwhile(procs, command[0])
        procs = []
    try:
        contain(
            cgroup_procs=procs,
            ppid=int(config["ppid"]) if config.get("pdeathsig") else None,
            rlimits=config.get("rlimits", {}),
            for_exec=not here,
            plan=plan,
            sealer=config.get("sealer"),  # inherited from the supervisor, closed by contain
        )
    except SandboxError as exc:
        os.write(2, f"{EXEC_FAILED} {command[0]}: {exc}\n".encode())
        os._exit(127)
    if here:
        become_own_child(command[len(OWN_CHILD) + 1 :])
    try:
        os.execvpe(command[0], command, os.environ)
    except OSError as exc:
        os.write(2, f"{EXEC_FAILED} {command[0]}: {exc.strerror}\n".encode())
        os._exit(127)


def become_own_child(args: list[str]) -> None:
    """What `python -I -m tether.child ARGS` does after its start, in this process (started
    with `-I`, site already imported).

    The module is run by name, as `-m` runs it (`runpy`): this package knows the command, not
    the child runtime's code. `tether.child.__main__` claims the wire before it imports
    anything else, then serves and ends the process; an exception it raises ends this one with
    a traceback and status 1, as the exec'd interpreter would."""
    import runpy

    sys.argv = [OWN_CHILD[-1], *args]
    runpy.run_module(OWN_CHILD[-1], run_name="__main__", alter_sys=True)
    os._exit(0)  # not reached: the child runtime ends the process itself


if __name__ == "__main__":
    main(sys.argv)
