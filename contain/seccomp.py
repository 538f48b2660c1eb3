"""A seccomp filter for sandboxed children: a small classic-BPF program, built here.

Landlock leaves some doors open that a system call filter closes. Each entry of `POLICY` says
what it stops; everything not named is allowed (this is a deny list of escape routes, not an
allow list of every system call a program may make — tools must keep working).

- the wrong architecture (a 32-bit or x32 system call from a 64-bit process has other numbers,
  so the filter would check the wrong calls): the process is killed;
- `socket`/`socketpair` other than AF_UNIX stream or seqpacket: no UDP, TCP, raw, netlink or
  packet sockets (EAFNOSUPPORT), and no UNIX datagram socket, which could `sendmsg` to any
  socket path without connecting (EACCES);
- `connect`: Landlock before ABI 9 does not cover pathname UNIX sockets (a D-Bus or docker
  socket outside the workspace), so no connect at all (EACCES) — unless the plan has
  `local_sockets` (`unix_connect=True`): then `socket` can still only make AF_UNIX stream and
  seqpacket sockets, so `connect` can only reach a UNIX socket, and the sealed private mounts
  (or Landlock ABI 9) and Landlock's abstract-socket scope leave only the run's own reachable;
- with `inet=True` (a foreign agent that must reach the model gateway, `sandbox_program`):
  `socket` makes TCP sockets only (AF_INET/AF_INET6 stream) and no UNIX socket at all
  (EACCES), so `connect` can be allowed: it can then only reach a TCP address, and the run's
  private network namespace and Landlock port rule leave the gateway as the one TCP address
  there is; `socketpair` stays as above (a runtime's own pipes to its children);
- `io_uring_*`: its operations run outside the system call path this filter sees (ENOSYS);
- `ptrace`, `process_vm_readv/writev`, `pidfd_getfd`: no reading or steering another
  process, in or out of the sandbox (EPERM);
- `keyctl`, `add_key`, `request_key`: the kernel keyrings are shared per uid (EPERM);
- `bpf`, `perf_event_open`, `userfaultfd`: large kernel attack surface no tool needs (EPERM);
- the mount family, `pivot_root`, `chroot`, `open_by_handle_at`, `unshare`, `setns`, and
  `clone` with any namespace flag: no new namespaces (the usual way to regain capabilities
  inside one) and no mount changes (EPERM);
- `clone` with `CLONE_PARENT`: a process made with it is the child of the sandboxed child's
  parent (the supervisor, or the zygote), which never waits for a process it did not start;
  each would stay a zombie there, a pid and a task held for as long as the supervisor lives
  (EPERM);
- `clone3`: its flags live in memory a filter cannot read, so it is refused with ENOSYS and
  glibc falls back to `clone`, whose flags it can check.

Only the standard library (see `_sys.py`).
"""

from __future__ import annotations

import ctypes
import errno
import struct
from collections.abc import Sequence

from tether.contain._sys import AUDIT_ARCH, MACHINE, numbers, prctl

# BPF instruction classes and fields (linux/filter.h, linux/bpf_common.h)
BPF_LD, BPF_ALU, BPF_JMP, BPF_RET = 0x00, 0x04, 0x05, 0x06
BPF_W, BPF_ABS, BPF_K = 0x00, 0x20, 0x00
BPF_AND, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JSET = 0x50, 0x00, 0x10, 0x30, 0x40

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

OFFSET_NR = 0
OFFSET_ARCH = 4


def offset_arg(i: int) -> int:
    """The low 32 bits of argument `i` (little-endian: x86_64 and aarch64)."""
    return 16 + 8 * i


X32_SYSCALL_BIT = 0x40000000
AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
SOCK_STREAM = 1
SOCK_SEQPACKET = 5
SOCK_FLAGS = 0o4000 | 0o2000000  # SOCK_NONBLOCK | SOCK_CLOEXEC
CLONE_PARENT = 0x00008000
CLONE_NAMESPACES = (
    0x00020000  # NEWNS
    | 0x02000000  # NEWCGROUP
    | 0x04000000  # NEWUTS
    | 0x08000000  # NEWIPC
    | 0x10000000  # NEWUSER
    | 0x20000000  # NEWPID
    | 0x40000000  # NEWNET
)
CLONE_REFUSED = CLONE_NAMESPACES | CLONE_PARENT
"""`clone` flags the filter refuses (EPERM)."""

DENY: tuple[tuple[str, int], ...] = (
    ("connect", errno.EACCES),
    ("io_uring_setup", errno.ENOSYS),
    ("io_uring_enter", errno.ENOSYS),
    ("io_uring_register", errno.ENOSYS),
    ("ptrace", errno.EPERM),
    ("process_vm_readv", errno.EPERM),
    ("process_vm_writev", errno.EPERM),
    ("pidfd_getfd", errno.EPERM),
    ("keyctl", errno.EPERM),
    ("add_key", errno.EPERM),
    ("request_key", errno.EPERM),
    ("bpf", errno.EPERM),
    ("perf_event_open", errno.EPERM),
    ("userfaultfd", errno.EPERM),
    ("mount", errno.EPERM),
    ("umount2", errno.EPERM),
    ("pivot_root", errno.EPERM),
    ("chroot", errno.EPERM),
    ("open_tree", errno.EPERM),
    ("open_tree_attr", errno.EPERM),
    ("move_mount", errno.EPERM),
    ("fsopen", errno.EPERM),
    ("fsconfig", errno.EPERM),
    ("fsmount", errno.EPERM),
    ("fspick", errno.EPERM),
    ("mount_setattr", errno.EPERM),
    ("open_by_handle_at", errno.EPERM),
    ("unshare", errno.EPERM),
    ("setns", errno.EPERM),
    ("clone3", errno.ENOSYS),
)
"""System calls refused outright, with the errno the caller sees."""


class Insn:
    """One BPF instruction; jump targets `jt`/`jf` are relative offsets or labels that
    `assemble` resolves. (Not a dataclass: the trampoline imports this module.)"""

    __slots__ = ("code", "jf", "jt", "k")

    def __init__(self, code: int, k: int = 0, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code = code
        self.k = k
        self.jt = jt
        self.jf = jf


Program = Sequence[Insn | str]
"""Instructions, with labels (plain strings) marking jump targets."""


def assemble(program: Program) -> bytes:
    """The `struct sock_filter` array of `program`, labels resolved to relative offsets."""
    labels: dict[str, int] = {}
    insns: list[Insn] = []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)
    out = bytearray()
    for i, insn in enumerate(insns):

        def rel(target: int | str, i: int = i) -> int:
            if isinstance(target, int):
                return target
            offset = labels[target] - i - 1
            if not 0 <= offset <= 255:
                raise ValueError(f"jump to {target!r} out of range ({offset})")
            return offset

        k = insn.k
        if insn.code == BPF_JMP | BPF_JA and isinstance(insn.jt, str):
            k, jt, jf = rel(insn.jt), 0, 0
        else:
            jt, jf = rel(insn.jt), rel(insn.jf)
        out += struct.pack("<HBBI", insn.code, jt, jf, k & 0xFFFFFFFF)
    return bytes(out)


def _load(offset: int) -> Insn:
    return Insn(BPF_LD | BPF_W | BPF_ABS, offset)


def _ret(value: int) -> Insn:
    return Insn(BPF_RET | BPF_K, value)


def _jeq(value: int, jt: int | str = 0, jf: int | str = 0) -> Insn:
    return Insn(BPF_JMP | BPF_JEQ | BPF_K, value, jt, jf)


def sandbox_program(
    arch: str = MACHINE, *, inet: bool = False, unix_connect: bool = False
) -> Program:
    """The filter for `arch` (`x86_64` or `aarch64`) as a labelled program; `inet`: the
    variant for a child that may connect to the model gateway over TCP; `unix_connect`: one
    that may connect to the UNIX sockets its mounts and Landlock leave reachable (see the
    module docstring)."""
    nrs = numbers(arch)
    allow_connect = inet or unix_connect
    deny = [(name, err) for name, err in DENY if not (allow_connect and name == "connect")]
    prog: list[Insn | str] = [
        _load(OFFSET_ARCH),
        _jeq(AUDIT_ARCH[arch], 1, 0),
        _ret(RET_KILL_PROCESS),
        _load(OFFSET_NR),
    ]
    if arch == "x86_64":
        prog.append(Insn(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, "kill", 0))
    prog += [
        _jeq(nrs["socket"], "inet" if inet else "unix", 0),
        _jeq(nrs["socketpair"], "unix", 0),
        _jeq(nrs["clone"], "clone", 0),
    ]
    errnos = sorted({e for _, e in deny})
    for name, err in deny:
        prog.append(_jeq(nrs[name], f"errno{err}", 0))
    prog.append(_ret(RET_ALLOW))
    if inet:
        prog += [
            "inet",
            _load(offset_arg(0)),
            _jeq(AF_INET, "stream", 0),
            _jeq(AF_INET6, "stream", 0),
            _jeq(AF_UNIX, f"errno{errno.EACCES}", f"errno{errno.EAFNOSUPPORT}"),
            "stream",
            _load(offset_arg(1)),
            Insn(BPF_ALU | BPF_AND | BPF_K, ~SOCK_FLAGS & 0xFFFFFFFF),
            _jeq(SOCK_STREAM, "allow", f"errno{errno.EACCES}"),
        ]
    prog += [
        "unix",
        _load(offset_arg(0)),
        _jeq(AF_UNIX, 0, f"errno{errno.EAFNOSUPPORT}"),
        _load(offset_arg(1)),
        Insn(BPF_ALU | BPF_AND | BPF_K, ~SOCK_FLAGS & 0xFFFFFFFF),
        _jeq(SOCK_STREAM, "allow", 0),
        _jeq(SOCK_SEQPACKET, "allow", f"errno{errno.EACCES}"),
        "clone",
        _load(offset_arg(0)),
        Insn(BPF_JMP | BPF_JSET | BPF_K, CLONE_REFUSED, f"errno{errno.EPERM}", "allow"),
        "allow",
        _ret(RET_ALLOW),
        "kill",
        _ret(RET_KILL_PROCESS),
    ]
    for err in sorted({*errnos, errno.EAFNOSUPPORT, errno.EACCES, errno.EPERM}):
        prog += [f"errno{err}", _ret(RET_ERRNO | err)]
    return prog


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


PR_GET_SECCOMP = 21
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def available() -> bool:
    """Whether this kernel has seccomp (PR_GET_SECCOMP answers)."""
    try:
        prctl(PR_GET_SECCOMP)
    except OSError:
        return False
    return MACHINE in AUDIT_ARCH


def install(
    program: Program | None = None, *, inet: bool = False, unix_connect: bool = False
) -> None:
    """Install the filter (`program`, default: `sandbox_program(inet=..., unix_connect=...)`)
    on the calling thread (needs no_new_privs); inherited by every child, kept across exec,
    never removable."""
    if program is None:
        program = sandbox_program(inet=inet, unix_connect=unix_connect)
    code = assemble(program)
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.addressof(buf))
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog))
