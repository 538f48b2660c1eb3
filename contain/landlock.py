"""Landlock, the kernel's unprivileged access control, over its three system calls.

A *ruleset* names the access rights it handles; rules grant some of them beneath a path;
`landlock_restrict_self` puts the calling thread (and everything it later starts) into a new
domain where every handled right not granted is denied. Domains stack: a process can only
ever lose rights. Rights, and the size of the ruleset attribute, depend on the kernel's ABI
version, pinned here up to `MAX_ABI`:

    ABI 1 (Linux 5.13)  filesystem: execute, read/write files, read dirs, remove, make *
    ABI 2 (5.19)        + REFER: link/rename across directories
    ABI 3 (6.2)         + TRUNCATE
    ABI 4 (6.7)         network: bind/connect TCP ports
    ABI 5 (6.10)        + IOCTL_DEV: ioctl on device files
    ABI 6 (6.12)        scoping: abstract UNIX sockets and signals stay inside the domain
    ABI 7 (6.15)        audit logging flags (nothing new to handle)
    ABI 8 (7.0)         restrict every thread at once (a flag; nothing new to handle)
    ABI 9 (7.1)         + RESOLVE_UNIX: connect/sendto to pathname UNIX sockets, allowed
                        beneath a rule's path or to a socket bound in the same domain

A newer kernel speaks every older ABI, so a domain built for `min(kernel, MAX_ABI)` is always
accepted. What Landlock does not cover at any ABI tether uses (UDP and raw sockets, pathname
UNIX sockets before ABI 9, chmod/chown/utime/setxattr, ptrace within the domain) is left to
seccomp, the sealed private mounts and the uid change; see docs/containment.md.

Only the standard library (see `_sys.py`).
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable

from tether.contain._sys import syscall

MAX_ABI = 9
SCOPE_ABI = 6
"""The first ABI that keeps abstract UNIX sockets and signals inside the domain."""
RESOLVE_UNIX_ABI = 9
"""The first ABI that handles connecting to pathname UNIX sockets."""

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13
TRUNCATE = 1 << 14
IOCTL_DEV = 1 << 15
RESOLVE_UNIX = 1 << 16

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The only rights a rule on a file (not a directory) may carry."""

NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2


def fs_rights(abi: int) -> int:
    """Every filesystem right ABI `abi` handles."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    if abi >= RESOLVE_UNIX_ABI:
        rights |= RESOLVE_UNIX
    return rights


def net_rights(abi: int) -> int:
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= SCOPE_ABI else 0


READ = EXECUTE | READ_FILE | READ_DIR
"""Read and execute: system paths, the interpreter, the import path."""
WRITE = fs_rights(MAX_ABI) & ~(MAKE_CHAR | MAKE_BLOCK)
"""Everything but device nodes: the workspace and the private temp dirs (where, from ABI 9,
connecting to a socket is allowed too; nowhere else is)."""
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV
"""/dev/null and friends: `> /dev/null` opens with O_TRUNC; isatty() is an ioctl."""


def kernel_abi() -> int:
    """The ABI the kernel speaks; 0 when Landlock is not built in (ENOSYS) or not enabled at
    boot (EOPNOTSUPP)."""
    try:
        return syscall("landlock_create_ruleset", None, 0, _CREATE_RULESET_VERSION)
    except OSError:
        return 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPort(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


def _attr_size(abi: int) -> int:
    return 8 if abi < 4 else 16 if abi < 6 else 24


class Ruleset:
    """A Landlock ruleset for ABI `abi`: add path rules, then `restrict_self()`."""

    def __init__(self, abi: int) -> None:
        self.abi = min(abi, MAX_ABI)
        self.handled = fs_rights(self.abi)
        attr = _RulesetAttr(self.handled, net_rights(self.abi), scopes(self.abi))
        self.fd = syscall(
            "landlock_create_ruleset", ctypes.addressof(attr), _attr_size(self.abi), 0
        )
        self.granted: list[tuple[str, int]] = []

    def allow(self, path: str, rights: int) -> bool:
        """Grant `rights` beneath `path` (only the file rights, on a file). A path that does
        not exist is skipped: `False`."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            rights &= self.handled
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= FILE_RIGHTS
            if not rights:
                return False
            rule = _PathBeneath(rights, fd)
            syscall("landlock_add_rule", self.fd, _RULE_PATH_BENEATH, ctypes.addressof(rule), 0)
        finally:
            os.close(fd)
        self.granted.append((path, rights))
        return True

    def allow_all(self, paths: Iterable[str], rights: int) -> None:
        for path in paths:
            self.allow(path, rights)

    def allow_port(self, port: int, rights: int = NET_CONNECT_TCP) -> bool:
        """Grant `rights` (connect, bind) on TCP `port`, any address; `False` below ABI 4,
        where Landlock handles no network rights at all."""
        rights &= net_rights(self.abi)
        if not rights:
            return False
        rule = _NetPort(rights, port)
        syscall("landlock_add_rule", self.fd, _RULE_NET_PORT, ctypes.addressof(rule), 0)
        self.granted.append((f"tcp:{port}", rights))
        return True

    def restrict_self(self) -> None:
        """Enter the domain (needs no_new_privs or CAP_SYS_ADMIN). Per thread: call it while
        the process has one thread, right before exec."""
        try:
            syscall("landlock_restrict_self", self.fd, 0)
        finally:
            os.close(self.fd)
