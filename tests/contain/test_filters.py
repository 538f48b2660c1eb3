"""The seccomp filter and the Landlock domain, each applied alone to a real process."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tether.contain import landlock, seccomp
from tether.contain._sys import AUDIT_ARCH, MACHINE, numbers

HERE = Path(__file__).parent
needs_landlock = pytest.mark.skipif(landlock.kernel_abi() < 1, reason="no Landlock here")
needs_seccomp = pytest.mark.skipif(not seccomp.available(), reason="no seccomp here")


def _run(*args: str) -> dict[str, str]:
    got = subprocess.run(
        [sys.executable, "-I", str(HERE / "filtered.py"), *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert got.returncode == 0, got.stderr
    out: dict[str, str] = json.loads(got.stdout)
    return out


@needs_seccomp
def test_the_filter_allows_only_unix_stream_and_seqpacket_sockets_and_denies_escapes() -> None:
    got = _run("seccomp")
    for family in ("udp", "tcp", "tcp6", "raw", "netlink", "packet"):
        assert got[family] == "EAFNOSUPPORT", (family, got)
    assert got["unix_dgram"] == "EACCES"
    assert got["socketpair_dgram"] == "EACCES"
    for fine in ("unix_stream", "unix_stream_cloexec", "unix_seqpacket", "socketpair_stream"):
        assert got[fine] == "ok", (fine, got)
    assert got["connect"] == "EACCES"
    for denied in (
        "unshare_user",
        "clone_newns",
        "clone_parent",
        "ptrace",
        "bpf",
        "keyctl",
        "mount",
    ):
        assert got[denied] == "EPERM", (denied, got)
    assert got["open_tree"] == "EPERM"
    assert got["clone3"] == "ENOSYS" and got["io_uring_setup"] == "ENOSYS"
    assert got["fork"] == "ok" and got["getpid"] == "ok" and got["pipe"] == "ok"


@needs_landlock
def test_a_landlock_domain_grants_what_it_names_and_denies_the_rest(tmp_path: Path) -> None:
    rw = tmp_path / "rw"
    rw.mkdir()
    server = socket.create_server(("127.0.0.1", 0))
    try:
        got = _run("landlock", str(rw), str(server.getsockname()[1]))
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever connected
    finally:
        server.close()
    assert got["read_usr"] == "ok" and got["write_rw"] == "ok"
    assert got["read_etc_passwd"] == "EACCES"
    assert got["write_outside"] == "EACCES"
    assert got["mknod_rw"] in ("EACCES", "EPERM")
    if landlock.kernel_abi() >= 4:
        assert got["tcp_connect"] == "EACCES"
    if landlock.kernel_abi() >= 6:
        assert got["signal_parent"] == "EPERM"


def test_the_landlock_rights_grow_with_the_abi_and_never_exceed_the_pinned_table() -> None:
    assert landlock.fs_rights(1) == (1 << 13) - 1
    assert landlock.fs_rights(2) & landlock.REFER and not landlock.fs_rights(1) & landlock.REFER
    assert landlock.fs_rights(3) & landlock.TRUNCATE
    assert landlock.fs_rights(5) & landlock.IOCTL_DEV
    assert landlock.net_rights(3) == 0 and landlock.net_rights(4) != 0
    assert landlock.scopes(5) == 0 and landlock.scopes(6) != 0
    assert landlock.WRITE & (landlock.MAKE_CHAR | landlock.MAKE_BLOCK) == 0
    for abi in range(1, landlock.MAX_ABI + 1):
        assert landlock.fs_rights(abi) <= landlock.fs_rights(abi + 1)


@pytest.mark.parametrize("arch", sorted(AUDIT_ARCH))
def test_the_filter_checks_the_architecture_first_and_kills_on_a_mismatch(arch: str) -> None:
    code = seccomp.assemble(seccomp.sandbox_program(arch))
    insns = [struct.unpack("<HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    assert insns[0] == (seccomp.BPF_LD | seccomp.BPF_W | seccomp.BPF_ABS, 0, 0, 4)
    assert insns[1][3] == AUDIT_ARCH[arch] and insns[1][1] == 1
    assert insns[2] == (seccomp.BPF_RET | seccomp.BPF_K, 0, 0, seccomp.RET_KILL_PROCESS)
    denied = {numbers(arch)[name] for name, _ in seccomp.DENY}
    compared = {k for code_, _, _, k in insns if code_ == seccomp.BPF_JMP | seccomp.BPF_JEQ}
    assert denied <= compared
    assert len(insns) < 256  # every relative jump fits in a byte


def test_x86_64_also_kills_x32_system_calls() -> None:
    prog = seccomp.sandbox_program("x86_64")
    assert any(not isinstance(i, str) and i.k == seccomp.X32_SYSCALL_BIT for i in prog), (
        "x32 numbers (with bit 30) are not checked"
    )


def test_an_unresolvable_jump_is_an_error_not_a_wrong_program() -> None:
    far = [seccomp.Insn(seccomp.BPF_JMP | seccomp.BPF_JEQ, 1, "end", 0)]
    far += [seccomp.Insn(seccomp.BPF_RET, 0)] * 300 + ["end", seccomp.Insn(seccomp.BPF_RET, 0)]
    with pytest.raises(ValueError, match="out of range"):
        seccomp.assemble(far)


def test_this_machine_is_one_the_sandbox_knows() -> None:
    assert MACHINE in AUDIT_ARCH


# --- the variant for a foreign agent that must reach the model gateway ---------------------


@needs_seccomp
def test_the_gateway_variant_allows_tcp_stream_sockets_and_connect_and_no_unix_socket() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        got = _run("seccomp-inet", str(server.getsockname()[1]))
    finally:
        server.close()
    for fine in ("tcp", "tcp6", "tcp_cloexec", "tcp_connect", "socketpair_stream", "fork"):
        assert got[fine] == "ok", (fine, got)
    # A UNIX socket could connect to a pathname socket outside the sandbox, now that connect
    # is allowed; UDP and raw sockets are not TCP.
    for refused in ("unix_stream", "unix_dgram", "udp", "raw", "socketpair_dgram"):
        assert got[refused] == "EACCES", (refused, got)
    assert got["netlink"] == "EAFNOSUPPORT" and got["packet"] == "EAFNOSUPPORT"
    assert got["unshare_net"] == "EPERM" and got["ptrace"] == "EPERM"


@needs_seccomp
def test_the_local_sockets_variant_allows_unix_connect_and_still_only_unix_stream_sockets() -> None:
    got = _run("seccomp-unix")
    # Past the filter: nobody listens on that abstract name.
    assert got["unix_connect"] == "ECONNREFUSED", got
    assert got["unix_dgram"] == "EACCES", got
    assert got["tcp"] == got["udp"] == "EAFNOSUPPORT", got
    assert got["unshare_user"] == got["ptrace"] == "EPERM", got


@pytest.mark.parametrize("arch", sorted(AUDIT_ARCH))
def test_the_local_sockets_variant_differs_from_the_default_only_by_connect(arch: str) -> None:
    default = seccomp.assemble(seccomp.sandbox_program(arch))
    unix = seccomp.assemble(seccomp.sandbox_program(arch, unix_connect=True))
    # One comparison fewer (the connect check) and nothing else changed in length.
    assert len(default) - len(unix) == 8


@pytest.mark.parametrize("arch", sorted(AUDIT_ARCH))
def test_the_default_filter_is_unchanged_by_the_gateway_variant(arch: str) -> None:
    default = seccomp.assemble(seccomp.sandbox_program(arch))
    insns = [struct.unpack("<HBBI", default[i : i + 8]) for i in range(0, len(default), 8)]
    jeq = seccomp.BPF_JMP | seccomp.BPF_JEQ
    assert numbers(arch)["connect"] in {k for c, _, _, k in insns if c == jeq}
    inet = seccomp.assemble(seccomp.sandbox_program(arch, inet=True))
    assert inet != default and len(inet) < 256 * 8
    assert seccomp.assemble(seccomp.sandbox_program(arch, inet=False)) == default


@needs_landlock
@pytest.mark.skipif(landlock.kernel_abi() < 4, reason="Landlock below ABI 4 handles no TCP")
def test_a_landlock_port_rule_grants_connect_to_that_port_only(tmp_path: Path) -> None:
    granted = socket.create_server(("127.0.0.1", 0))
    other = socket.create_server(("127.0.0.1", 0))
    try:
        got = _run(
            "landlock-port",
            str(tmp_path),
            str(granted.getsockname()[1]),
            str(other.getsockname()[1]),
        )
        other.setblocking(False)
        with pytest.raises(BlockingIOError):
            other.accept()  # nothing reached the port that was not granted
    finally:
        granted.close()
        other.close()
    assert got == {"connect_granted": "ok", "connect_other": "EACCES", "bind": "EACCES"}
