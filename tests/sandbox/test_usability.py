"""Normal work keeps working inside the sandbox, through the built-in agent's `bash`, for both
spawners: Python with ssl, sqlite3 and multiprocessing, temp files, /dev/null and
/dev/urandom, git in the workspace, a venv with pip, a subprocess tree torn down at the end;
and a workspace owned by root or by another user stays usable, every file the child creates
landing on disk owned by the workspace's owner."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from sandbox_targets import PY, config, needs_root, needs_sandbox, run_bash

from tether.parent.process import zygote_command
from tether.parent.process.isolation import probe_host
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import RunResult

pytestmark = [pytest.mark.anyio, needs_sandbox]
SPAWNERS = pytest.mark.parametrize("spawner", ["exec", "zygote"])


async def bash(workspace: Path, command: str, spawner: str = "exec") -> tuple[RunResult, str]:
    """Run one bash command through a scripted model in the sandbox; its result and output."""
    async with Supervisor(config(spawner=spawner, isolation="sandbox")) as sup:
        with anyio.fail_after(120):
            return await run_bash(sup, workspace, command)


PYTHON_WORK = """
import multiprocessing, os, sqlite3, ssl, tempfile
ctx = ssl.create_default_context()
db = sqlite3.connect(os.path.join(tempfile.gettempdir(), "t.db"))
db.execute("create table t (x)"); db.execute("insert into t values (42)")
lock = multiprocessing.Lock()
with lock, multiprocessing.Pool(2) as pool:
    squares = pool.map(abs, [-1, -2, -3])
with tempfile.NamedTemporaryFile() as f:
    f.write(b"x")
open(os.devnull, "w").write("gone")
random = open("/dev/urandom", "rb").read(16)
print("python-ok", ctx.verify_mode, db.execute("select x from t").fetchone()[0], squares,
      len(random), tempfile.gettempdir(), os.environ["HOME"])
"""


@SPAWNERS
async def test_python_with_ssl_sqlite_multiprocessing_temp_files_and_devices_works(
    tmp_path: Path, spawner: str
) -> None:
    (tmp_path / "work.py").write_text(PYTHON_WORK)
    result, out = await bash(tmp_path, f"{PY} work.py", spawner)
    assert result.success, result
    assert "python-ok" in out and "42 [1, 2, 3] 16" in out, out


@SPAWNERS
async def test_temp_files_dev_null_and_urandom_work_from_bash(tmp_path: Path, spawner: str) -> None:
    command = (
        'f=$(mktemp) && echo hi > "$f" && cat "$f" && echo x > /dev/null && '
        "head -c 8 /dev/urandom | wc -c && echo $TMPDIR $HOME && mkfifo pipe && echo fifo-ok"
    )
    _, out = await bash(tmp_path, command, spawner)
    assert out.startswith("exit status 0"), out
    assert "hi\n8\n" in out and "fifo-ok" in out, out


@SPAWNERS
async def test_git_init_add_and_commit_work_in_the_workspace(tmp_path: Path, spawner: str) -> None:
    command = (
        "git init -q . && echo hello > a.txt && git add a.txt && "
        "git -c user.name=Tether -c user.email=t@example.invalid commit -q -m first && "
        "git log --oneline | wc -l"
    )
    _, out = await bash(tmp_path, command, spawner)
    assert out.startswith("exit status 0"), out
    assert out.strip().endswith("1"), out
    assert (tmp_path / ".git" / "HEAD").exists()


async def test_a_venv_in_the_workspace_runs_pip(tmp_path: Path) -> None:
    _, out = await bash(tmp_path, f"{PY} -m venv venv && venv/bin/pip --version")
    assert out.startswith("exit status 0"), out
    assert "pip " in out and str(tmp_path / "venv") in out, out


@SPAWNERS
async def test_a_subprocess_tree_is_torn_down_at_the_end(tmp_path: Path, spawner: str) -> None:
    # A background job, and a daemon that left the session: both gone once the run ends (the
    # autouse reaper fails the test if any survives).
    command = (
        "sleep 300 & "
        f"{PY} -c 'import os, subprocess; "
        'subprocess.Popen(["sleep", "300"], start_new_session=True); '
        'open("daemon", "w").write("started")\'; echo launched'
    )
    result, out = await bash(tmp_path, command, spawner)
    assert "launched" in out and (tmp_path / "daemon").exists(), out
    assert result.success


def owned_workspace(root: Path, owner: int) -> Path:
    """A workspace only `owner` may enter, with one file of another user's in it."""
    ws = root / f"ws-{owner}"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "old.txt").write_text("old\n")
    (ws / "others.txt").write_text("someone else's\n")
    for path in (ws, ws / "src", ws / "src" / "old.txt"):
        os.chown(path, owner, owner)
    ws.chmod(0o700)  # only the owner may enter: the idmapping makes the child that owner
    os.chown(ws / "others.txt", 4242, 4242)
    return ws


OWNER_WORK = " && ".join(
    [
        "mkdir -p made/deep",
        "echo new > made/deep/new.txt",
        "echo more >> src/old.txt",
        "chmod 600 src/old.txt",
        "stat -c '%u %a' src/old.txt",
        "stat -c '%u' others.txt",
        "id -u",
    ]
)


def assert_owned(ws: Path, owner: int, out: str) -> None:
    """What `OWNER_WORK` printed and left behind in `owned_workspace(owner)`."""
    assert out.startswith("exit status 0"), out
    lines = out.splitlines()
    me = lines[-1]
    assert lines[-3] == f"{me} 600", out  # the child owns what the owner owns
    assert lines[-2] == "65534", out  # another user's file shows as the overflow uid
    for path in (ws / "made", ws / "made" / "deep", ws / "made" / "deep" / "new.txt"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (owner, owner), path
    assert (ws / "src" / "old.txt").read_text() == "old\nmore\n"
    assert (ws / "src" / "old.txt").stat().st_mode & 0o777 == 0o600
    assert int(me) != owner and int(me) != 0


@needs_root
@SPAWNERS
@pytest.mark.parametrize("owner", [0, 1000], ids=["root-owned", "user-owned"])
async def test_a_workspace_stays_usable_and_new_files_belong_to_its_owner(
    tmp_path: Path, owner: int, spawner: str
) -> None:
    ws = owned_workspace(tmp_path, owner)
    _, out = await bash(ws, OWNER_WORK, spawner)
    assert_owned(ws, owner, out)


@needs_root
@pytest.mark.parametrize("standby", [False, True], ids=["forked on request", "standby"])
async def test_one_zygote_maps_each_workspace_to_its_own_owner_and_keeps_one_namespace_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, standby: bool
) -> None:
    """The zygote makes the user namespace of an idmapped workspace once per mapping (and the
    one a sealed view is idmapped through, once) and hands them to each child that needs them
    (forked on request, or handed to the parked standby); the child closes them before its
    own code runs."""
    if not standby:
        monkeypatch.setattr(zygote_command, "STANDBY_AFTER", None)
    owners = [0, 1000, 0, 1000]
    async with Supervisor(config(spawner="zygote", isolation="sandbox")) as sup:
        zygote = await sup._zygote_ready()
        for i, owner in enumerate(owners):
            ws = owned_workspace(tmp_path / str(i), owner)
            if standby:
                assert await zygote.parked(within=10.0) is not None
            child_fds: list[str] = []
            with anyio.fail_after(120):
                _, out = await run_bash(sup, ws, OWNER_WORK, child_fds)
            assert_owned(ws, owner, out)
            assert child_fds and not [fd for fd in child_fds if fd.startswith("user:[")]
        assert zygote.forks == (
            {"standby": 4, "fresh": 0} if standby else {"standby": 0, "fresh": 4}
        )
        fds = os.listdir(f"/proc/{zygote.pid}/fd")
        links = [os.readlink(f"/proc/{zygote.pid}/fd/{n}") for n in fds]
    # One per mapping, and the one every sealed view is idmapped through (local sockets).
    sealing = 1 if probe_host().local_sockets else 0
    assert len([link for link in links if link.startswith("user:[")]) == 2 + sealing, links


async def test_the_run_names_its_level_and_landlock_abi(tmp_path: Path) -> None:
    result, _ = await bash(tmp_path, "true")
    assert result.isolation is not None
    assert result.isolation.level == "sandbox" and result.isolation.warning is None
    assert result.isolation.landlock_abi is not None and result.isolation.landlock_abi >= 1


async def test_tethers_own_child_starts_sandboxed_from_its_sources_without_bytecode(
    tmp_path: Path,
) -> None:
    """A child that finds no bytecode cache to use (a read-only install, a supervisor run with
    PYTHONDONTWRITEBYTECODE, a cache another Python wrote) compiles what it imports from
    source: every file of tether it imports is readable inside the sandbox, the top package's
    `__init__` included (a strict editable install links it from the checkout's `api/`)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    caches = tmp_path / "caches"  # empty, and outside everything the sandbox grants
    caches.mkdir()
    command = (PY, "-I", "-X", f"pycache_prefix={caches}", "-m", "tether.child")
    async with Supervisor(config(isolation="sandbox", command=command)) as sup:
        with anyio.fail_after(120):
            result, out = await run_bash(sup, ws, "echo ran")
    assert result.success, result
    assert out.startswith("exit status 0") and "ran" in out, out
