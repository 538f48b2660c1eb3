"""Shared by the sandbox tests (conftest.py puts this folder on `sys.path`). Targets for the
attack tests: loopback listeners that must hear nothing, UNIX
sockets outside the workspace, a visible directory outside it with a world-writable file
owned by someone else, canary secrets in the supervisor's environment."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.isolation import probe_host
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import Event, RunStarted
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import RunResult

HERE = Path(__file__).parent
ATTACKS = HERE / "attacks.py"
HOSTILE = HERE / "hostile_child.py"
CHILDREN = HERE.parent / "children"
"""The shared `_wire` helpers of the protocol children: a sandboxed child may read them only
when granted (`read_paths`), like any directory its command does not name."""
FAST = DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=1.0)
CANARIES = {
    "OPENAI_API_KEY": "sk-canary-openai-7f3a",
    "DATABASE_URL": "postgres://app:canary-db-password-91c2@db.internal/app",
}

WHY_NOT = probe_host().why_not
needs_sandbox = pytest.mark.skipif(WHY_NOT is not None, reason=f"no sandbox here: {WHY_NOT}")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the uid change needs a root supervisor")

REFUSED = (
    "supervisor_environ",
    "supervisor_mem",
    "supervisor_fd_list",
    "supervisor_fd_reopen",
    "supervisor_ptrace",
    "supervisor_vm_readv",
    "supervisor_pidfd_getfd",
    "supervisor_signal",
    "keeper_signal",
    "keeper_environ",
    "keeper_pipe_reopen",
    "keeper_ptrace",
    "udp",
    "udp6",
    "raw_socket",
    "netlink_socket",
    "packet_socket",
    "unix_dgram_outside",
    "unix_pathname_outside",
    "unix_abstract_outside",
    "tcp_connect",
    "bash_dev_tcp",
    "bash_dev_udp",
    "mknod",
    "chmod_outside",
    "chown_outside",
    "utime_outside",
    "setxattr_outside",
    "chmod_etc_passwd",
    "write_outside",
    "create_outside",
    "read_etc_shadow",
    "open_by_handle_at",
    "unshare_user_namespace",
    "io_uring",
    "setuid_root",
    "leave_cgroup",
    "raise_nofile",
    "zombie_in_parent",
)
"""Every attack the sandbox must refuse, whoever drives it."""


def config(**kwargs: Any) -> ChildConfig:
    return ChildConfig(dispose=FAST, handshake_timeout=20.0, **kwargs)


def not_refused(report: dict[str, str], names: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The attacks in `names` (and the supervisor's-cwd read, when it was tried) that did not
    come back refused (empty when all were)."""
    names = [*names, *(["supervisor_cwd_read"] if "supervisor_cwd_read" in report else [])]
    return {
        name: report.get(name, "missing")
        for name in names
        if not report.get(name, "").startswith("refused")
    }


@dataclass
class Targets:
    workspace: Path
    outside: Path
    udp: socket.socket
    udp6: socket.socket | None
    tcp: socket.socket
    unix: socket.socket
    unix_dgram: socket.socket
    abstract: socket.socket
    abstract_name: str
    extra: dict[str, Any] = field(default_factory=dict)

    def write(self, **fields: Any) -> dict[str, Any]:
        data = {
            "workspace": str(self.workspace),
            "outside_dir": str(self.outside),
            "udp_port": self.udp.getsockname()[1],
            "udp6_port": self.udp6.getsockname()[1] if self.udp6 else self.udp.getsockname()[1],
            "tcp_port": self.tcp.getsockname()[1],
            "unix_path": str(self.outside / "listen.sock"),
            "unix_dgram": str(self.outside / "dgram.sock"),
            "abstract": self.abstract_name,
            "canaries": list(CANARIES.values()),
            # A file in the supervisor's working directory: never granted to a child.
            "cwd_file": next((str(p) for p in sorted(Path.cwd().iterdir()) if p.is_file()), ""),
            **fields,
        }
        (self.workspace / "targets.json").write_text(json.dumps(data))
        return data

    def heard(self) -> list[str]:
        """Which listeners received anything (must stay empty)."""
        got = []
        for name, sock in (
            ("udp", self.udp),
            ("udp6", self.udp6),
            ("unix_dgram", self.unix_dgram),
        ):
            if sock is None:
                continue
            with contextlib.suppress(BlockingIOError):
                sock.recv(100)
                got.append(name)
        for name, sock in (("tcp", self.tcp), ("unix", self.unix), ("abstract", self.abstract)):
            with contextlib.suppress(BlockingIOError):
                conn, _ = sock.accept()
                conn.close()
                got.append(name)
        return got

    def victim_untouched(self) -> bool:
        st = (self.outside / "victim.txt").stat()
        return (
            (st.st_mode & 0o7777) == 0o666
            and st.st_uid == 1000
            and (self.outside / "victim.txt").read_text() == "original\n"
            and not (self.outside / "new.txt").exists()
            and st.st_mtime == self.extra["victim_mtime"]
        )


def make_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Targets]:
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "attacks.py").write_bytes(ATTACKS.read_bytes())
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("original\n")
    os.utime(victim, (1_000_000_000, 1_000_000_000))
    if os.geteuid() == 0:
        os.chown(victim, 1000, 1000)
    victim.chmod(0o666)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp6: socket.socket | None = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        udp6.bind(("::1", 0))
    except OSError:  # no IPv6 loopback here
        udp6.close()
        udp6 = None
    tcp = socket.create_server(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(outside / "listen.sock"))
    unix.listen()
    os.chmod(outside / "listen.sock", 0o777)
    unix_dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    unix_dgram.bind(str(outside / "dgram.sock"))
    os.chmod(outside / "dgram.sock", 0o777)
    name = f"tether-test-{os.getpid()}-{os.urandom(4).hex()}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + name)
    abstract.listen()
    socks = [s for s in (udp, udp6, tcp, unix, unix_dgram, abstract) if s is not None]
    for s in socks:
        s.setblocking(False)
    got = Targets(ws, outside, udp, udp6, tcp, unix, unix_dgram, abstract, name)
    got.extra["victim_mtime"] = victim.stat().st_mtime
    try:
        yield got
    finally:
        for s in socks:
            s.close()


PY = sys.executable


async def run_bash(
    sup: Supervisor,
    workspace: Path,
    command: str,
    child_fds: list[str] | None = None,
    *,
    level: str = "sandbox",
) -> tuple[RunResult, str]:
    """`bash` in a supervisor of the caller's, whose runs are at isolation `level`.
    `child_fds`: filled with what the child's own fds point to, read from outside while it
    runs the command."""
    turns = {
        "turns": [
            {"text": "", "toolCalls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "ok", "toolCalls": [{"name": "complete", "arguments": {"summary": "ok"}}]},
        ]
    }
    outputs: list[str] = []

    pids: list[int] = []

    def keep(ev: Event) -> None:
        data: dict[str, Any] = getattr(ev, "data", {})
        if isinstance(ev, RunStarted):
            pids.append(ev.pid)
        elif getattr(ev, "kind", "") == "tool_call" and child_fds is not None:
            where = f"/proc/{pids[0]}/fd"
            child_fds.extend(os.readlink(f"{where}/{n}") for n in os.listdir(where))
        elif getattr(ev, "kind", "") == "tool_result" and data.get("name") == "bash":
            outputs.append(str(data["content"]))

    result = await sup.run(
        "work",
        agent="tester",
        workspace=workspace,
        model=ScriptedModel.from_json(json.dumps(turns)),
        on_event=keep,
    )
    assert result.isolation is not None and result.isolation.level == level
    assert outputs, result
    return result, outputs[0]
