"""Shared fixtures: the anyio backend, and the reaper that fails a test leaving processes; and
the spawn count, which says at the end of a run how many tests started a process."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import settings

TESTS = Path(__file__).parent

# Property tests judge outcomes, never time: hypothesis's default deadline (200 ms per example)
# is a timing assertion that a loaded 2-core machine fails on examples that take 4 ms at rest.
settings.register_profile("tether", deadline=None)
settings.load_profile("tether")
CHILDREN = TESTS / "children"
TREE_ENV = "TETHER_TREE"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _read_line(proc: subprocess.Popen[bytes], seconds: float) -> bytes:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + seconds
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            break
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
    return buf


@pytest.fixture
def read_line() -> Callable[[subprocess.Popen[bytes], float], bytes]:
    """`read_line(proc, seconds)`: the first line a process writes to its stdout pipe, or what
    came before the deadline or its exit (for hosts that report pids before a test kills them)."""
    return _read_line


def _modules_loaded_by(code: str) -> list[str]:
    report = "import json as _json, sys as _sys\nprint(_json.dumps(sorted(_sys.modules)))"
    script = f"{code}\n{report}\n"
    got = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert got.returncode == 0, got.stderr
    loaded: list[str] = json.loads(got.stdout.splitlines()[-1])
    return loaded


@pytest.fixture
def modules_loaded_by() -> Callable[[str], list[str]]:
    """`modules_loaded_by(code)`: every module a fresh `python -I` holds once it has run `code`
    (what an import, or a call made before a program's imports, costs it)."""
    return _modules_loaded_by


def _host_pid(pidfile: Path) -> int:
    """The pid, as this host's /proc numbers it, of the process that wrote its own pid into
    `pidfile` from wherever it runs: inside a PID namespace with a /proc of its own, a process
    knows only its namespace's pid. Found as the process whose command line names `pidfile`
    (the test children take it as an argument, and a fork keeps it) and whose innermost pid
    (`NSpid`, the last one) is the one written; 0 once no such process exists."""
    wrote = int(pidfile.read_text())
    for proc in psutil.process_iter(["cmdline"]):
        if str(pidfile) not in (proc.info["cmdline"] or []):
            continue
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                nspid = next(line for line in f if line.startswith("NSpid:")).split()[1:]
        except (OSError, StopIteration):
            continue
        if int(nspid[-1]) == wrote:
            return proc.pid
    return 0


@pytest.fixture
def host_pid() -> Callable[[Path], int]:
    """`host_pid(pidfile)`: see `_host_pid`."""
    return _host_pid


def _tier_params() -> list[object]:
    from tether.parent.process.host import TIERS, host

    params: list[object] = []
    for tier in TIERS:
        try:
            host(tier)
        except ValueError as exc:
            params.append(pytest.param(tier, id=tier, marks=pytest.mark.skip(reason=str(exc))))
        else:
            params.append(pytest.param(tier, id=tier))
    return params


@pytest.fixture(params=_tier_params())
def tier(request: pytest.FixtureRequest) -> str:
    """Each containment tier: a test taking `tier` runs once per tier, the tier in its id, and
    is skipped with the host's reason on a tier this host does not offer."""
    return str(request.param)


def _tree_marked_pids(prefix: str) -> list[int]:
    """Pids whose environment carries a tether tree marker minted by this test process.

    This finds processes that escaped our descendant tree (setsid + double fork reparents them
    to init), which a psutil children() walk cannot see.
    """
    needle = f"{TREE_ENV}={prefix}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read()
        except ProcessLookupError:
            env = b""  # a zombie leader: its threads may still run
        except OSError:
            continue
        if not env:
            env = _a_threads_environ(entry.name)
        if needle in env:
            found.append(int(entry.name))
    return found


def _a_threads_environ(pid: str) -> bytes:
    """The environment block as another thread of `pid` shows it: a leader thread that exited
    alone shows none of its own (`tests/children/lone_thread.py`)."""
    try:
        tids = [t for t in os.listdir(f"/proc/{pid}/task") if t != pid]
    except OSError:
        return b""
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/environ", "rb") as f:
                return f.read()
        except OSError:
            continue
    return b""


def survivors() -> list[psutil.Process]:
    me = psutil.Process()
    procs: dict[int, psutil.Process] = {}
    for p in me.children(recursive=True):
        procs[p.pid] = p
    for pid in _tree_marked_pids(f"{os.getpid()}-"):
        if pid != me.pid and pid not in procs:
            try:
                procs[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                pass
    return [p for p in procs.values() if any_thread_runs(p.pid)]


def any_thread_runs(pid: int) -> bool:
    """Whether any thread of process `pid` is still running: its leader thread shows as a
    zombie once its main thread has exited, even while other threads run on
    (`tests/children/lone_thread.py`)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X"):
            return True
    return False


@pytest.fixture
def thread_runs() -> Callable[[int], bool]:
    """`thread_runs(pid)`: see `any_thread_runs`."""
    return any_thread_runs


@pytest.fixture(autouse=True)
def reaper() -> Iterator[None]:
    """Fail the test if any process it started (directly or not) is still alive after it."""
    yield
    deadline = time.monotonic() + 2.0
    left = survivors()
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = survivors()
    if left:
        described = []
        for p in left:
            try:
                described.append(f"{p.pid} {p.cmdline()!r}")
                os.kill(p.pid, signal.SIGKILL)
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
        pytest.fail("processes left behind: " + "; ".join(described))


# The spawn count: every way this interpreter starts a process raises one of these audit events
# in the test's own process (subprocess, and asyncio's and anyio's subprocesses through it:
# `subprocess.Popen`; multiprocessing's and tether's own forks: `os.fork`), so a test "started a
# process" when one was raised while its setup, call or teardown ran, in any thread. A process
# started by a module- or session-scoped fixture counts once, for the first test that needed it.
_SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"}
)
_spawns = 0
_SPAWNED = "spawned"


def _count_spawns(event: str, args: tuple[object, ...]) -> None:
    global _spawns
    if event in _SPAWN_EVENTS:
        _spawns += 1


sys.addaudithook(_count_spawns)


IN_MEMORY = "in_memory"
"""The marker of the supervisor tier that runs without processes: its tests run their children
on the in-memory transport (`ChildConfig(transport="memory")`), and one that starts a process
all the same fails (`no_process_started`)."""


@pytest.fixture(autouse=True)
def no_process_started(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test of the in-memory tier that started a process (see `IN_MEMORY`)."""
    yield
    if request.node.get_closest_marker(IN_MEMORY) is not None and _spawns:
        pytest.fail(f"a test marked {IN_MEMORY} started {_spawns} process(es)", pytrace=False)


_UNGROUPED = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker under `--dist loadgroup`, a test marked `xdist_group` must carry its
    group in its id (`...@ray`), or the scheduler spreads the group over the workers: tests
    that must not run at once (two Ray clusters, two wheel builds of one tree) then do, and
    nothing says so. pytest 9.2 with pytest-xdist 3.8 did exactly that (pyproject's pin); each
    such test now fails, saying why."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            item.stash[_UNGROUPED] = True


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.stash.get(_UNGROUPED, False):
        pytest.fail(
            "--dist loadgroup is not honoured by this pytest and pytest-xdist: this test is "
            "marked xdist_group but its id carries no group, so its group is spread over the "
            "workers (see the pytest pin in pyproject.toml)",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    global _spawns
    _spawns = 0
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, object]:
    report = yield
    # Each phase's report carries the count so far; it crosses to an xdist controller with it.
    report.user_properties.append((_SPAWNED, _spawns))
    return report


_ran: dict[str, list[float]] = {}
"""Each test that ran (skipped ones left out): [whether it started a process, its seconds]."""
SPAWN_REPORT_ENV = "TETHER_SPAWN_REPORT"
"""A file to write one line per test to: whether it started a process, its seconds, its id."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and report.when in ("setup", "call"):
        _ran.pop(report.nodeid, None)
        return
    if report.when == "teardown" and report.nodeid not in _ran:
        return  # skipped: its teardown reports too
    seen = _ran.setdefault(report.nodeid, [0.0, 0.0])
    spawned = any(name == _SPAWNED and count for name, count in report.user_properties)
    seen[0] = max(seen[0], float(spawned))
    seen[1] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _ran:
        return
    spawned = sum(int(s) for s, _ in _ran.values())
    terminalreporter.write_line(f"tests that started a process: {spawned} of {len(_ran)} that ran")
    path = os.environ.get(SPAWN_REPORT_ENV)
    if path:
        rows = sorted(_ran.items(), key=lambda kv: -kv[1][1])
        Path(path).write_text("".join(f"{int(s)}\t{t:.3f}\t{nodeid}\n" for nodeid, (s, t) in rows))
