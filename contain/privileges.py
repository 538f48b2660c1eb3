"""Privileges: the death signal, dumpability, no_new_privs, and dropping to an unprivileged
uid/gid with every capability gone for good.

`drop_to(uid, gid)` is what turns a root trampoline into an unprivileged child:

1. securebits locked (needs CAP_SETPCAP, so first): `NOROOT` (uid 0 gains no capabilities at
   exec), `NO_CAP_AMBIENT_RAISE`, and `KEEP_CAPS` / `NO_SETUID_FIXUP` locked *off*, so the uid
   change below clears the permitted and effective sets and nothing can ask to keep them;
2. every capability removed from the bounding set (no exec can ever regain one) and the
   ambient set cleared;
3. supplementary groups cleared, then gid, then uid (real, effective and saved);
4. `capset` to empty sets (the uid change leaves the inheritable set alone), then a check
   against /proc/self/status that all five sets are zero.

Only the standard library (see `_sys.py`).
"""

from __future__ import annotations

import os

from tether.contain._sys import prctl, syscall

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

SECBIT_NOROOT = 1 << 0
SECBIT_NOROOT_LOCKED = 1 << 1
SECBIT_NO_SETUID_FIXUP_LOCKED = 1 << 3
SECBIT_KEEP_CAPS_LOCKED = 1 << 5
SECBIT_NO_CAP_AMBIENT_RAISE = 1 << 6
SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED = 1 << 7
LOCKED_SECUREBITS = (
    SECBIT_NOROOT
    | SECBIT_NOROOT_LOCKED
    | SECBIT_NO_SETUID_FIXUP_LOCKED
    | SECBIT_KEEP_CAPS_LOCKED
    | SECBIT_NO_CAP_AMBIENT_RAISE
    | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
)

_CAP_V3 = 0x20080522
CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def set_pdeathsig(sig: int) -> None:
    prctl(PR_SET_PDEATHSIG, sig)


def set_dumpable(dumpable: bool) -> None:
    """`PR_SET_DUMPABLE`: a non-dumpable process cannot be ptraced, and its /proc files
    (environ, mem, fd/, ...) are owned by root, by anyone without CAP_SYS_PTRACE — the same uid
    included. Reset to dumpable by the kernel at every exec of an ordinary program."""
    prctl(PR_SET_DUMPABLE, 1 if dumpable else 0)


def set_child_subreaper() -> None:
    """`PR_SET_CHILD_SUBREAPER`: a descendant orphaned by its parent's death is made this
    process's child instead of init's. Not inherited by children; raises `OSError`."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_no_new_privs() -> None:
    """No exec may grant privileges again (setuid bits, file capabilities); required for an
    unprivileged seccomp filter or Landlock domain, and inherited by every descendant."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def cap_sets() -> dict[str, int]:
    """This process's five capability sets, from /proc/self/status."""
    found: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in CAP_SETS:
                found[name] = int(value.strip(), 16)
    return found


def clear_capabilities() -> None:
    """Empty the effective, permitted and inheritable sets (what remains after a uid change)."""
    import ctypes  # only a sandbox drops capabilities: no other child pays for ctypes

    class CapHeader(ctypes.Structure):
        _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

    class CapData(ctypes.Structure):
        _fields_ = (
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        )

    header = CapHeader(_CAP_V3, 0)
    data = (CapData * 2)()
    syscall("capset", ctypes.addressof(header), ctypes.addressof(data))


def _lock_and_drop_bounding() -> None:
    """Steps 1 and 2 (see the module docstring)."""
    prctl(PR_SET_SECUREBITS, LOCKED_SECUREBITS)
    for cap in range(last_cap() + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno != 22:  # EINVAL: a capability this kernel does not know
                raise
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)


def _clear_and_check() -> None:
    """Step 4 (see the module docstring)."""
    clear_capabilities()
    left = {name: value for name, value in cap_sets().items() if value}
    if left:
        raise OSError(f"capabilities survived the drop: {left}")


def drop_to(uid: int, gid: int) -> None:
    """Become `uid`/`gid` with no supplementary group and no capability, irrevocably.
    Raises `OSError` when any step fails or a capability survives."""
    _lock_and_drop_bounding()
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _clear_and_check()


def drop_namespace_capabilities() -> None:
    """A non-root process that made a user namespace of its own (`mounts.user_namespace`)
    holds every capability inside it: drop them all, irrevocably, as `drop_to` does, keeping
    its uid and gid. Raises `OSError`."""
    _lock_and_drop_bounding()
    _clear_and_check()


def drop_capabilities_unprivileged() -> None:
    """A non-root process: clear the ambient set (the others hold nothing a plain user can
    use, and no_new_privs keeps exec from adding any)."""
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass
