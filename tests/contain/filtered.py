"""Run as `python -I filtered.py WHAT`: install the sandbox's seccomp filter (WHAT=seccomp), its
variant for a child that may reach the model gateway (WHAT=seccomp-inet PORT: PORT is a
listener to connect to), its variant for a child with local sockets (WHAT=seccomp-unix), or
a Landlock domain granting read of /usr and /proc and read/write of argv[2] (WHAT=landlock RW
PORT; WHAT=landlock-port RW PORT OTHER: TCP connect to PORT granted), then try a list of
operations and print {operation: "ok" or errno name} as JSON."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import sys

from tether.contain import landlock, privileges, seccomp
from tether.contain._sys import syscall


def attempt(fn: object) -> str:
    try:
        fn()  # type: ignore[operator]
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    return "ok"


def _socket(family: int, kind: int) -> None:
    socket.socket(family, kind).close()


def _socketpair(kind: int) -> None:
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    a.close()
    b.close()


def _connect_unix() -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0tether-test-nobody-listens")
    finally:
        s.close()


def _fork_with(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # clone(flags | SIGCHLD, NULL, ...): the child exits at once.
    pid = libc.syscall(56 if os.uname().machine == "x86_64" else 220, flags | 17, 0, 0, 0, 0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone")
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _connect_tcp(port: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.connect(("127.0.0.1", port))
    finally:
        s.close()


def seccomp_inet_checks(port: int) -> dict[str, str]:
    privileges.set_no_new_privs()
    seccomp.install(inet=True)
    return {
        "tcp": attempt(lambda: _socket(socket.AF_INET, socket.SOCK_STREAM)),
        "tcp6": attempt(lambda: _socket(socket.AF_INET6, socket.SOCK_STREAM)),
        "tcp_cloexec": attempt(
            lambda: _socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        ),
        "tcp_connect": attempt(lambda: _connect_tcp(port)),
        "udp": attempt(lambda: _socket(socket.AF_INET, socket.SOCK_DGRAM)),
        "raw": attempt(lambda: _socket(socket.AF_INET, socket.SOCK_RAW)),
        "netlink": attempt(lambda: _socket(socket.AF_NETLINK, socket.SOCK_RAW)),
        "packet": attempt(lambda: _socket(socket.AF_PACKET, socket.SOCK_RAW)),
        "unix_stream": attempt(lambda: _socket(socket.AF_UNIX, socket.SOCK_STREAM)),
        "unix_dgram": attempt(lambda: _socket(socket.AF_UNIX, socket.SOCK_DGRAM)),
        "socketpair_stream": attempt(lambda: _socketpair(socket.SOCK_STREAM)),
        "socketpair_dgram": attempt(lambda: _socketpair(socket.SOCK_DGRAM)),
        "unshare_net": attempt(lambda: syscall("unshare", 0x40000000)),
        "ptrace": attempt(lambda: syscall("ptrace", 16, os.getppid(), 0, 0)),
        "fork": attempt(lambda: _fork_with(0)),
    }


def seccomp_unix_checks() -> dict[str, str]:
    privileges.set_no_new_privs()
    seccomp.install(unix_connect=True)
    return {
        "unix_connect": attempt(_connect_unix),
        "unix_dgram": attempt(lambda: _socket(socket.AF_UNIX, socket.SOCK_DGRAM)),
        "tcp": attempt(lambda: _socket(socket.AF_INET, socket.SOCK_STREAM)),
        "udp": attempt(lambda: _socket(socket.AF_INET, socket.SOCK_DGRAM)),
        "unshare_user": attempt(lambda: syscall("unshare", 0x10000000)),
        "ptrace": attempt(lambda: syscall("ptrace", 16, os.getppid(), 0, 0)),
    }


def landlock_port_checks(rw: str, port: int, other: int) -> dict[str, str]:
    rules = landlock.Ruleset(landlock.kernel_abi())
    rules.allow_all(["/usr", "/proc"], landlock.READ)
    rules.allow(rw, landlock.WRITE)
    rules.allow_port(port)
    privileges.set_no_new_privs()
    rules.restrict_self()

    def bind_any() -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", other + 1))
        finally:
            s.close()

    return {
        "connect_granted": attempt(lambda: _connect_tcp(port)),
        "connect_other": attempt(lambda: _connect_tcp(other)),
        "bind": attempt(bind_any),
    }


def seccomp_checks() -> dict[str, str]:
    privileges.set_no_new_privs()
    seccomp.install()
    return {
        "udp": attempt(lambda: _socket(socket.AF_INET, socket.SOCK_DGRAM)),
        "tcp": attempt(lambda: _socket(socket.AF_INET, socket.SOCK_STREAM)),
        "tcp6": attempt(lambda: _socket(socket.AF_INET6, socket.SOCK_STREAM)),
        "raw": attempt(lambda: _socket(socket.AF_INET, socket.SOCK_RAW)),
        "netlink": attempt(lambda: _socket(socket.AF_NETLINK, socket.SOCK_RAW)),
        "packet": attempt(lambda: _socket(socket.AF_PACKET, socket.SOCK_RAW)),
        "unix_dgram": attempt(lambda: _socket(socket.AF_UNIX, socket.SOCK_DGRAM)),
        "unix_stream": attempt(lambda: _socket(socket.AF_UNIX, socket.SOCK_STREAM)),
        "unix_stream_cloexec": attempt(
            lambda: _socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        ),
        "unix_seqpacket": attempt(lambda: _socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)),
        "socketpair_stream": attempt(lambda: _socketpair(socket.SOCK_STREAM)),
        "socketpair_dgram": attempt(lambda: _socketpair(socket.SOCK_DGRAM)),
        "connect": attempt(_connect_unix),
        "unshare_user": attempt(lambda: syscall("unshare", 0x10000000)),
        "clone_newns": attempt(lambda: _fork_with(0x00020000)),
        "clone_parent": attempt(lambda: _fork_with(0x00008000)),
        "fork": attempt(lambda: _fork_with(0)),
        "clone3": attempt(lambda: syscall("clone3", None, 0)),
        "io_uring_setup": attempt(lambda: syscall("io_uring_setup", 1, None)),
        "ptrace": attempt(lambda: syscall("ptrace", 16, os.getppid(), 0, 0)),
        "bpf": attempt(lambda: syscall("bpf", 0, None, 0)),
        "keyctl": attempt(lambda: syscall("keyctl", 0, 0, 0, 0, 0)),
        "mount": attempt(lambda: syscall("mount", b"none", b"/", None, 0, None)),
        "open_tree": attempt(lambda: syscall("open_tree", -100, b"/", 0)),
        "getpid": attempt(os.getpid),
        "pipe": attempt(lambda: [os.close(fd) for fd in os.pipe()]),
    }


def landlock_checks(rw: str) -> dict[str, str]:
    rules = landlock.Ruleset(landlock.kernel_abi())
    rules.allow_all(["/usr", "/proc"], landlock.READ)
    rules.allow(rw, landlock.WRITE)
    privileges.set_no_new_privs()
    rules.restrict_self()
    outside = os.path.join(os.path.dirname(rw), "outside.txt")
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    got = {
        "read_usr": attempt(lambda: open("/usr/lib/os-release", "rb").close()),
        "read_etc_passwd": attempt(lambda: open("/etc/passwd", "rb").close()),
        "write_rw": attempt(lambda: open(os.path.join(rw, "f"), "w").close()),
        "write_outside": attempt(lambda: open(outside, "w").close()),
        "mknod_rw": attempt(lambda: os.mknod(os.path.join(rw, "dev"), 0o600 | 0o020000, 0)),
        "tcp_connect": attempt(lambda: tcp.connect(("127.0.0.1", int(sys.argv[3])))),
        "signal_parent": attempt(lambda: os.kill(os.getppid(), 0)),
    }
    tcp.close()
    return got


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "seccomp":
        out = seccomp_checks()
    elif what == "seccomp-unix":
        out = seccomp_unix_checks()
    elif what == "seccomp-inet":
        out = seccomp_inet_checks(int(sys.argv[2]))
    elif what == "landlock-port":
        out = landlock_port_checks(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        out = landlock_checks(sys.argv[2])
    print(json.dumps(out))
