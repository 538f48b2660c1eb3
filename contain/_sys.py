"""The system calls the sandbox needs that Python does not wrap: libc through ctypes, and the
syscall numbers of the two architectures tether supports (x86_64 and aarch64).

Only the standard library: this module runs in the trampoline, before `site` is imported.

`prctl`, the one call every child makes (its death signal, its dumpability), goes through
`_ctypes`, the extension `ctypes` is written on, with the two integer types it passes: `ctypes`
itself costs ≈ 1.3 ms to import on top of that extension (its types, its loaders, the Python
API handle), and an unsandboxed child needs nothing else of it. `libc`, `syscall` and `check`
import `ctypes` on first use (the sandbox's mounts, Landlock, seccomp, capabilities).
"""

from __future__ import annotations

import _ctypes
import os

TYPE_CHECKING = False  # not `typing`: the trampoline imports none of it
if TYPE_CHECKING:
    import ctypes
    from typing import Any

MACHINE = os.uname().machine
"""`x86_64` or `aarch64` (anything else: no sandbox, see `supported_arch`)."""

# Numbers that differ per architecture. Everything from 424 up is shared by every
# architecture (the generic table), so it is listed once below.
_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {
        "socket": 41,
        "connect": 42,
        "socketpair": 53,
        "clone": 56,
        "ptrace": 101,
        "capset": 126,
        "pivot_root": 155,
        "chroot": 161,
        "mount": 165,
        "umount2": 166,
        "waitid": 247,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "unshare": 272,
        "perf_event_open": 298,
        "open_by_handle_at": 304,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "bpf": 321,
        "userfaultfd": 323,
    },
    "aarch64": {
        "socket": 198,
        "connect": 203,
        "socketpair": 199,
        "clone": 220,
        "ptrace": 117,
        "capset": 91,
        "pivot_root": 41,
        "chroot": 51,
        "mount": 40,
        "umount2": 39,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "unshare": 97,
        "waitid": 95,
        "perf_event_open": 241,
        "open_by_handle_at": 265,
        "setns": 268,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "bpf": 280,
        "userfaultfd": 282,
    },
}
_GENERIC = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
    "landlock_create_ruleset": 444,
    "landlock_add_rule": 445,
    "landlock_restrict_self": 446,
    "open_tree_attr": 467,
}

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
"""What `seccomp_data.arch` holds for a native system call on each architecture."""


def supported_arch() -> bool:
    return MACHINE in _NUMBERS


def nr(name: str) -> int:
    """The system call number of `name` on this architecture."""
    if name in _GENERIC:
        return _GENERIC[name]
    return _NUMBERS[MACHINE][name]


def numbers(arch: str) -> dict[str, int]:
    """Every number this module knows for `arch` (for the filter builder and its tests)."""
    return {**_NUMBERS[arch], **_GENERIC}


_lib: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    """The C library through `ctypes`, opened at the first call that needs it."""
    global _lib
    if _lib is None:
        import ctypes

        _lib = ctypes.CDLL(None, use_errno=True)
        _lib.syscall.restype = ctypes.c_long
    return _lib


def __getattr__(name: str) -> Any:
    """`libc`: the C library through `ctypes` (imported on first use)."""
    if name == "libc":
        return _libc()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    libc: ctypes.CDLL


def syscall(name: str, *args: int | bytes | ctypes._CData | None) -> int:
    """Call `name` with integer, bytes, pointer or NULL arguments; raise `OSError` on -1."""
    import ctypes

    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    got = int(_libc().syscall(ctypes.c_long(nr(name)), *converted))
    if got < 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return got


def check(result: int, what: str) -> int:
    """Raise `OSError` with errno when a libc call returned -1."""
    if result < 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


class _CInt(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "i"  # `ctypes.c_int`, defined as ctypes defines it


class _CULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "L"  # `ctypes.c_ulong`


class _LibcFunction(_ctypes.CFuncPtr):
    """A libc function returning `int`, with errno kept for `_ctypes.get_errno` (what
    `ctypes.CDLL(None, use_errno=True)` makes of each of its functions)."""

    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _CInt


class _Process:
    # The process's own symbols, as `CDLL(None)` opens them (typeshed allows no `None`).
    _handle = _ctypes.dlopen(None, os.RTLD_LOCAL)  # type: ignore[arg-type]


_prctl = _LibcFunction(("prctl", _Process()))  # type: ignore[arg-type]  # any object with `_handle`


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return check(
        int(_prctl(_CInt(option), _CULong(arg2), _CULong(arg3), _CULong(arg4), _CULong(arg5))),
        f"prctl({option})",
    )
