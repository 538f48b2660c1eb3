"""The supervisor as an ordinary user: run here as uid 1000 with Debian's /usr/bin/python3 (the
project's interpreter lives under /root, mode 0700) and PYTHONPATH pointing at the project.

- The non-root sandbox (Landlock, seccomp, no_new_privs, a private temp dir): a hostile model
  driving bash is refused every attack but the one docs/containment.md names: metadata of
  the user's own files outside the workspace (this test pins that the gap is what the doc
  says, no more);
- the non-root sandbox refuses writes to a repository's `.git/hooks` and `.git/config` in a
  user namespace of its own (the user's git, run as uid 1000 afterwards, runs no payload),
  unless the run opts in, and every attack above is still refused from that namespace;
- the process level's non-dumpable promise, with a real same-uid attacker: another uid-1000
  process cannot read the environment or descriptors of the supervisor, keeper or child
  runtime, while it can read an ordinary uid-1000 process's. (The zygote, which makes
  itself non-dumpable the same way, cannot be started here: it runs `python -I`, which
  ignores the PYTHONPATH this interpreter needs to find the project.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from git_payloads import git_payloads, repository, users_git
from sandbox_targets import ATTACKS, HERE, REFUSED, make_targets, not_refused

import tether.contain

USER = 1000
AS_USER = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--"]
DEBIAN_PY = "/usr/bin/python3"
PROJECT = [
    sysconfig.get_paths()["purelib"],  # the dependencies (cp311, as Debian's python)
    str(Path(tether.contain.__file__).parent.parent.parent),  # the folder holding tether/
]
OWN_FILES = ("chmod_outside", "chown_outside", "utime_outside", "setxattr_outside")


def _usable() -> str | None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "needs root and setpriv to start a supervisor as uid 1000"
    if not os.access(DEBIAN_PY, os.X_OK):
        return f"no {DEBIAN_PY} (the project's own interpreter may not be usable by uid 1000)"
    got = subprocess.run(
        [
            *AS_USER,
            "env",
            f"PYTHONPATH={':'.join(PROJECT)}",
            DEBIAN_PY,
            "-c",
            "import sys, tether.parent.supervisor; assert sys.version_info >= (3, 11)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return None if got.returncode == 0 else f"uid 1000 cannot import the project: {got.stderr}"


WHY_NOT = _usable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))


@pytest.fixture
def user_dir() -> Iterator[Path]:
    """A directory uid 1000 owns and can reach (pytest's own tmp dirs are root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="tether-user-test-", dir="/tmp"))
    os.chmod(path, 0o755)
    os.chown(path, USER, USER)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _host(config: dict[str, object], **popen: object) -> subprocess.Popen[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": ":".join(PROJECT)}
    return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
        [
            *AS_USER,
            "env",
            "-i",
            *(f"{k}={v}" for k, v in env.items()),
            DEBIAN_PY,
            str(HERE / "user_host.py"),
            json.dumps(config),
        ],
        text=True,
        **popen,
    )


@pytest.mark.parametrize("repo", [False, True], ids=["plain", "in-its-own-user-namespace"])
def test_the_non_root_sandbox_refuses_every_attack_but_metadata_of_the_users_own_files(
    user_dir: Path, monkeypatch: pytest.MonkeyPatch, repo: bool
) -> None:
    """`repo`: the workspace holds a repository, so the child runs in the user namespace its
    git guard needs (every capability it had there dropped): nothing more gets through."""
    targets_gen = make_targets(user_dir, monkeypatch)
    targets = next(targets_gen)
    try:
        if repo:
            subprocess.run(["git", "init", "-q", str(targets.workspace)], check=True)
        for path in (targets.workspace, targets.outside):
            for p in [path, *path.rglob("*")]:
                os.lchown(p, USER, USER)
        targets.write(supervisor=0, keeper=0)
        os.chown(targets.workspace / "targets.json", USER, USER)
        config = {
            "mode": "attack",
            "workspace": str(targets.workspace),
            "isolation": "sandbox",
            "read_paths": [*PROJECT, str(targets.outside)],
        }
        before = set(Path("/tmp").glob("tether-sandbox-*"))
        host = _host(config, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = host.communicate(timeout=120)
        assert host.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        text = (targets.workspace / "report.json").read_text()
        report = json.loads(text[text.index("{") :])
        expected = [n for n in REFUSED if n not in OWN_FILES]
        expected += ["child_wire_reopen", "child_environ", "child_ptrace"]
        assert not_refused(report, expected) == {}
        # The documented gap: the user's own file outside the workspace (visible through a
        # read grant) can have its mode changed; its content still cannot be written.
        assert report["chmod_outside"].startswith("ok"), report["chmod_outside"]
        assert report["write_outside"].startswith("refused")
        assert result["isolation"]["level"] == "sandbox" and result["summary"] == "done"
        assert targets.heard() == []
        # The child's private temp dir (HOME, TMPDIR) is removed when it is disposed (named
        # by the child: another test's supervisor may have one of its own meanwhile).
        private = Path((targets.workspace / "tmpdir.txt").read_text().strip()).parent
        assert private.name.startswith("tether-sandbox-") and private not in before
        assert not private.exists()
    finally:
        with contextlib.suppress(StopIteration):
            next(targets_gen)


def _bash(
    ws: Path, command: str, *, allow_git_config: bool = False, launcher: str = "local"
) -> dict[str, object]:
    config = {
        "launcher": launcher,
        "mode": "bash",
        "workspace": str(ws),
        "isolation": "sandbox",
        "read_paths": PROJECT,
        "command": command,
        "allow_git_config": allow_git_config,
    }
    host = _host(config, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = host.communicate(timeout=120)
    assert host.returncode == 0, err
    got: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return got


@pytest.mark.parametrize("launcher", ["local", "pidns"])
@pytest.mark.parametrize("opt_in", [False, True], ids=["guarded", "allow_git_config"])
def test_a_non_root_sandbox_refuses_git_hooks_and_config_unless_the_run_opts_in(
    user_dir: Path, opt_in: bool, launcher: str
) -> None:
    """Also under `pidns`, whose own user namespace the guard's is made in."""
    ws = repository(user_dir, owner=USER)
    marks = user_dir / "marks"
    payloads = git_payloads(marks, tamper=not opt_in)
    got = _bash(ws, payloads, allow_git_config=opt_in, launcher=launcher)
    assert got["unguarded"] is None  # this host lets a user make a user namespace
    out = str(got["output"])
    result = got["result"]
    assert isinstance(result, dict) and result["success"], result
    changed = sorted(c["path"] for c in result["sensitiveChanges"])
    users_git(ws, AS_USER)  # the user's own git, as the user
    if opt_in:
        assert "planted-hook" in out and "planted-fsmonitor" in out, out
        assert changed == [".git/config", ".git/hooks/post-checkout"]
        assert sorted(os.listdir(marks)) == ["fsmonitor", "hook", "pager"]
        return
    for said in ("planted-", "moved-git", "moved-hooks", "removed-config"):
        assert said not in out, out
    assert ".git/hooks/post-checkout: Read-only file system" in out, out
    assert changed == [] and sorted(os.listdir(marks)) == []


def test_a_same_user_process_cannot_read_the_supervisor_keeper_or_child(
    user_dir: Path,
    read_line: Callable[[subprocess.Popen[bytes], float], bytes],
) -> None:
    ws = user_dir / "ws"
    ws.mkdir()
    os.chown(ws, USER, USER)
    config = {
        "mode": "hold",
        "workspace": str(ws),
        "isolation": "process",
        "read_paths": PROJECT,
    }
    host = _host(config, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    control = subprocess.Popen([*AS_USER, "sleep", "60"])
    try:
        line = read_line(host, 60)  # type: ignore[arg-type]
        assert line, host.stderr.read() if host.stderr else ""
        pids = json.loads(line)
        assert set(pids) >= {"supervisor", "keeper", "child"}

        def readable(path: str) -> bool:
            got = subprocess.run([*AS_USER, "cat", path], capture_output=True, timeout=10)
            return got.returncode == 0

        def listable(path: str) -> bool:
            got = subprocess.run([*AS_USER, "ls", path], capture_output=True, timeout=10)
            return got.returncode == 0

        assert readable(f"/proc/{control.pid}/environ"), "the same-user model does not hold"
        assert listable(f"/proc/{control.pid}/fd")
        for who, pid in pids.items():
            assert not readable(f"/proc/{pid}/environ"), who
            assert not listable(f"/proc/{pid}/fd"), who
    finally:
        control.kill()
        control.wait()
        if host.stdin is not None:
            host.stdin.close()
        try:
            host.wait(timeout=30)
        finally:
            if host.poll() is None:
                host.kill()
                host.wait()
        for stream in (host.stdout, host.stderr):
            if stream is not None:
                stream.close()


def test_the_attack_script_is_stdlib_only() -> None:
    assert "import tether" not in ATTACKS.read_text()
    assert sys.executable


def test_a_non_root_sandboxed_acp_agent_may_connect_to_the_gateway_port_only(
    user_dir: Path,
) -> None:
    """Without root no network namespace can be made: the agent keeps the host's network, and
    Landlock lets it connect to the gateway's TCP port only; no UNIX socket at all."""
    ws = user_dir / "ws"
    ws.mkdir()
    os.chown(ws, USER, USER)
    other = socket.create_server(("127.0.0.1", 0))
    other.setblocking(False)
    port = other.getsockname()[1]
    steps = [
        {
            "post": {
                "url": "$ANTHROPIC_BASE_URL/v1/messages",
                "headers": {"x-api-key": "$ANTHROPIC_API_KEY"},
                "body": {
                    "model": "m",
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": "q"}],
                },
            }
        },
        {"connect": ["127.0.0.1", port]},
        {"unix_socket": True},
    ]
    config = {
        "mode": "acp",
        "workspace": str(ws),
        "isolation": "sandbox",
        "read_paths": PROJECT,
        "steps": steps,
    }
    try:
        host = _host(config, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = host.communicate(timeout=120)
        with pytest.raises(BlockingIOError):
            other.accept()  # nothing reached the port that is not the gateway's
    finally:
        other.close()
    assert host.returncode == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    assert got["result"]["success"], got["result"]
    assert got["result"]["isolation"]["level"] == "sandbox"
    texts = got["texts"]
    assert any("status 200" in t and "gateway answers" in t for t in texts), texts
    assert f"connect 127.0.0.1:{port}: EACCES" in texts
    assert "unix socket: EACCES" in texts


@pytest.mark.parametrize("layout", ["shared_memory", "beside_the_childs_code"])
def test_a_non_root_sandbox_refuses_a_session_store_it_could_not_keep_a_hostile_child_out_of(
    user_dir: Path, layout: str
) -> None:
    """Without private mounts the sandbox cannot carve the store out of a grant: a store in
    /dev/shm (which the child may write) or beside the child's code (which it may read) is
    refused before the hostile child starts; it would have read or rewritten its session."""
    code = user_dir / "code"
    ws = user_dir / "ws"
    for d in (code, ws):
        d.mkdir()
    for name in ("store_rewriter.py", "_wire.py"):
        shutil.copy(HERE.parent / "children" / name, code / name)
    state = code / ".state"
    if layout == "shared_memory":
        state = Path(tempfile.mkdtemp(prefix="tether-test-state-", dir="/dev/shm"))
        os.chown(state, USER, USER)
    model = "openai:x@http://127.0.0.1:9/v1"
    (ws / "targets.json").write_text(json.dumps({"state": str(state), "model": model}))
    for p in [code, ws, *code.iterdir(), *ws.iterdir()]:
        os.chown(p, USER, USER)
    config = {
        "mode": "store",
        "workspace": str(ws),
        "code": str(code),
        "state": str(state),
        "isolation": "sandbox",
        "read_paths": PROJECT,
    }
    try:
        host = _host(config, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = host.communicate(timeout=120)
        assert host.returncode == 0, err
        got = json.loads(out.strip().splitlines()[-1])
        assert "refused" in got, (got, (ws / "report.json").read_text())
        assert f"{state} must be kept from sandboxed children" in got["refused"]
        assert not (ws / "report.json").exists()
    finally:
        if layout == "shared_memory":
            shutil.rmtree(state, ignore_errors=True)
