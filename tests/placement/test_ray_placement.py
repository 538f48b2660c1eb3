"""Scale-out on a real two-node Ray cluster (on loopback): the same `run()`, children on nodes.

Every test here uses the module's cluster (`conftest.ray_cluster`): a head node (this process
is its driver) and a second node, one CPU each. The children are real processes started by
each node's host actor; the nodes share this machine, so a test can look at them in /proc.
The fault tests kill what a real cluster loses (the host actor, its worker process, a node's
raylet, the driver) and check that the run still ends as a result, within a stated bound,
with nothing left of the child's tree — a setsid daemon included — within 2 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import msgspec
import psutil
import pytest

from tether.parent import ChildConfig, Supervisor
from tether.parent.models.scripted import ScriptedModel
from tether.parent.placement import RayPlacement, RemoteRun
from tether.parent.process.limits import DisposePolicy
from tether.parent.run.events import ChildEvent, Event, RunFinished, RunStarted
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolCall,
    Usage,
)

from .conftest import (
    RayCluster,
    assert_loopback_only,
    live_actors,
    sigchld_ignored,
    tether_processes,
    wait_until,
)

# One worker runs this whole module (scripts/test distributes by group): the cluster is
# module-scoped, and two clusters at once would not fit a 2-core machine.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.ray,
    pytest.mark.timeout(120),
    pytest.mark.xdist_group("ray"),
]

CHILDREN = Path(__file__).parent.parent / "children"
ONE_TURN = (
    b'[{"text": "done", "toolCalls": [{"name": "complete",'
    b' "arguments": {"summary": "ok", "paths": []}}]}]'
)
GRACES = DisposePolicy(shutdown=0.5, eof=1.0, term=1.0, kill=1.0)
CONFIG = ChildConfig(dispose=GRACES, cancel_grace=1.0)
LOST_BOUND = 15.0
"""Seconds from a fault to the run's `placement_lost` result (the watchdog's `lost_after` is
5 s here; the engine usually tells sooner)."""


def child(name: str, *args: str) -> list[str]:
    return [sys.executable, "-I", str(CHILDREN / name), *args]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_for_file(
    path: Path,
    host_pid: Callable[[Path], int],
    seconds: float = 30.0,
    *,
    run: RemoteRun | None = None,
) -> int:
    """The host's pid of the daemon that `daemon_then_wait.py` reports in `path` (inside the
    `pidns` launcher's namespace it knows only the namespace's pid). `run`: the run that is to
    write it; one that ends first fails the wait at once, with its result."""
    with anyio.move_on_after(seconds):
        while not path.exists() or not path.read_text().strip():
            if run is not None and run.done:
                got = await run.result()
                failure = got.failure
                pytest.fail(
                    f"the run ended before {path.name} was written: {got.status}, "
                    f"{failure.kind if failure else ''}: {got.message}; its stderr: "
                    f"{failure.stderr_tail[-2000:] if failure else ''}"
                )
            await anyio.sleep(0.02)
    if not path.exists() or not path.read_text().strip():
        state = "no run given" if run is None else f"the run still going: {not run.done}"
        pytest.fail(f"{path.name} was not written within {seconds} s ({state})")
    pid = host_pid(path)
    assert pid, f"no live process wrote {path}"
    return pid


def pid_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def placement(cluster: RayCluster, **kwargs: Any) -> RayPlacement:
    kwargs.setdefault("nodes", cluster.nodes)
    kwargs.setdefault("lost_after", 5.0)
    return RayPlacement(CONFIG, **kwargs)


def comparable(result: RunResult) -> RunResult:
    """A result without what two runs of the same child cannot share: the pid, the duration,
    and the launcher (a placed child runs under its node's `pidns`)."""
    return msgspec.structs.replace(result, pid=None, duration_seconds=None, launcher=None)


def normalized(events: list[Event]) -> list[tuple[Any, ...]]:
    """Events as comparable tuples; a child's pid is the one thing two runs cannot share."""
    out: list[tuple[Any, ...]] = []
    for ev in events:
        if isinstance(ev, RunStarted):
            out.append(("started", ev.run_id, ev.argv))
        elif isinstance(ev, ChildEvent):
            out.append(("event", ev.run_id, ev.seq, ev.kind, json.dumps(ev.data, sort_keys=True)))
        elif isinstance(ev, RunFinished):
            out.append(("finished", ev.run_id, comparable(ev.result)))
    return out


# --- the same run, on a node ----------------------------------------------------------------


async def test_every_ray_socket_listens_on_loopback_and_every_node_is_127_0_0_1(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    import ray

    async with placement(ray_cluster) as sup:
        await sup.run("x", command=child("answer_and_exit.py"), workspace=tmp_path)
        assert assert_loopback_only() > 0  # with the hosts running
    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {"127.0.0.1"}


async def test_a_placed_run_asked_for_a_trace_is_refused_before_anything_is_placed(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    async with placement(ray_cluster) as sup:
        with pytest.raises(ValueError, match="a placed run takes no trace"):
            await sup.start("x", workspace=tmp_path, trace=tmp_path.parent / "traces")
        assert not sup._runs


async def test_a_run_on_a_chosen_node_is_the_local_run_event_for_event(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    local: list[Event] = []
    async with Supervisor(CONFIG) as sup:
        expected = await sup.run(
            "hello",
            model=ScriptedModel.from_json(ONE_TURN),
            workspace=tmp_path,
            run_id="same-run",
            on_event=local.append,
        )
    remote: list[Event] = []
    parents: list[tuple[list[str], list[int], str]] = []

    def on_event(ev: Event) -> None:
        remote.append(ev)
        if isinstance(ev, RunStarted):
            parent = psutil.Process(psutil.Process(ev.pid).ppid())
            above = [p.pid for p in parent.parents()]
            parents.append((parent.cmdline(), above, pid_namespace(parent.pid)))

    async with placement(ray_cluster, nodes=[ray_cluster.worker]) as psup:
        streamed: list[Event] = []
        async with psup.events() as stream:
            handle = await psup.start(
                "hello",
                model=ScriptedModel.from_json(ONE_TURN),
                workspace=tmp_path,
                run_id="same-run",
                on_event=on_event,
            )
            got = await handle.result()
            async for ev in stream:
                streamed.append(ev)
                if isinstance(ev, RunFinished):
                    break
        host = psup.hosts[ray_cluster.worker].info
    assert expected.success and comparable(got) == comparable(expected)
    assert (expected.launcher, got.launcher) == ("local", "pidns")
    assert normalized(remote) == normalized(local) == normalized(streamed)
    assert [type(e).__name__ for e in remote][0 :: len(remote) - 1] == ["RunStarted", "RunFinished"]
    assert handle.node == ray_cluster.worker and host is not None
    assert host.node_id == ray_cluster.worker and host.launcher == "pidns"
    # Forked by the node's zygote, which runs in a PID namespace of its own under the host.
    (started,) = [e for e in remote if isinstance(e, RunStarted)]
    assert started.spawner == "zygote" and started.fallback is None
    ((cmdline, above, namespace),) = parents
    assert "tether.child.zygote" in cmdline and host.pid in above
    assert namespace != pid_namespace(os.getpid())


async def test_a_fault_of_tethers_own_in_the_driver_is_a_parent_error_and_the_next_run_is_placed(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """What raises in the driver's own code while it streams a run is the run's `parent_error`
    result (never an exception in the caller, never `placement_lost` blaming the engine), and
    the placement goes on placing runs."""

    class Broken:
        def remote(self, *args: Any) -> Any:
            raise RuntimeError("a bug in the driver")

    async with placement(ray_cluster, nodes=[ray_cluster.worker]) as psup:
        host = psup.hosts[ray_cluster.worker]
        actor = host.actor
        host.actor = SimpleNamespace(run=Broken())
        with anyio.fail_after(60):
            failed = await (await psup.start("hello", workspace=tmp_path)).result()
        host.actor = actor
        with anyio.fail_after(60):
            model = ScriptedModel.from_json(ONE_TURN)
            fine = await (await psup.start("hello", model=model, workspace=tmp_path)).result()
    assert failed.failure is not None and failed.failure.kind == "parent_error", failed
    assert failed.status == "error" and "RuntimeError: a bug in the driver" in failed.message
    assert fine.success, fine


class RecordingModel:
    """A model that lives in the driver: it proves where `model/complete` is answered."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.calls.append((os.getpid(), params.run_id))
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="from the driver"),
            usage=Usage(input_tokens=7, output_tokens=3),
        )


async def test_model_calls_are_answered_in_the_driver_and_no_node_sees_a_key_or_ray_variable(
    ray_cluster: RayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The key exists only in the driver: set after the cluster's processes started.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-driver-only-secret")
    model = RecordingModel()
    dump = tmp_path / "env.json"
    async with placement(ray_cluster, nodes=[ray_cluster.worker]) as sup:
        asked = await sup.run("x", command=child("asks_model.py"), model=model, workspace=tmp_path)
        dumped = await sup.run("x", command=child("env_dump.py", str(dump)), workspace=tmp_path)
        host = sup.hosts[ray_cluster.worker].info
        assert host is not None
        host_env = Path(f"/proc/{host.pid}/environ").read_bytes()
    assert asked.success and asked.summary == "from the driver"
    assert (asked.usage.input_tokens, asked.usage.output_tokens) == (7, 3)
    assert model.calls == [(os.getpid(), asked.run_id)]
    assert dumped.success
    env = json.loads(dump.read_text())["environ"]
    assert not [k for k in env if k.startswith("RAY_")], env
    assert "sk-driver-only-secret" not in json.dumps(env)
    assert b"sk-driver-only-secret" not in host_env


async def test_a_crash_on_a_node_reads_as_the_same_crash_although_the_engine_ignored_sigchld(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    async with placement(ray_cluster) as sup:
        results = [
            await sup.run("x", command=child("signal_self.py", "abort"), workspace=tmp_path)
            for _ in ray_cluster.nodes
        ]
        infos = [h.info for h in sup.hosts.values()]
        pids = [i.pid for i in infos if i is not None]
        # The workers run under Ray's subreaper flag: SIGCHLD was ignored until the host reset
        # it, for the whole worker process.
        assert [i.sigchld_was_ignored for i in infos if i is not None] == [True, True]
        assert not any(sigchld_ignored(pid) for pid in pids)
    for result in results:
        assert result.failure is not None
        assert (result.failure.kind, result.failure.signal) == ("crashed", "SIGABRT")


async def test_closing_takes_every_child_down_the_ladder_on_its_node_and_reports_the_rungs(
    ray_cluster: RayCluster, tmp_path: Path, host_pid: Callable[[Path], int]
) -> None:
    handles: list[RemoteRun] = []
    daemons: list[int] = []
    async with placement(ray_cluster) as sup:
        for i in range(2):
            pidfile = tmp_path / f"daemon{i}"
            handles.append(
                await sup.start(
                    "x", command=child("daemon_then_wait.py", str(pidfile)), workspace=tmp_path
                )
            )
            daemons.append(await wait_for_file(pidfile, host_pid, run=handles[-1]))
        assert {h.node for h in handles} == set(ray_cluster.nodes), "one run per node"
        assert not any(gone(d) for d in daemons)
    results = [await h.result() for h in handles]
    reports = {r.node_id: r for r in sup.closed}
    assert set(reports) == set(ray_cluster.nodes)
    for handle, result in zip(handles, results, strict=True):
        assert result.failure is not None and result.failure.kind == "cancelled"
        # The child leaves on its lifeline: the EOF rung, on the node, not the engine's SIGKILL.
        assert result.failure.rung == "exit"
        assert handle.node is not None
        disposed = reports[handle.node].runs
        assert [(d.run_id, d.rung, d.pid) for d in disposed] == [
            (handle.run_id, "exit", handle.pid)
        ]
    assert all(gone(d) for d in daemons)


async def test_cancel_asks_the_child_on_its_node_and_the_caller_s_cancellation_disposes_it(
    ray_cluster: RayCluster, tmp_path: Path, host_pid: Callable[[Path], int]
) -> None:
    async with placement(ray_cluster, nodes=[ray_cluster.worker]) as sup:
        pidfile = tmp_path / "daemon"
        handle = await sup.start(
            "x", command=child("daemon_then_wait.py", str(pidfile)), workspace=tmp_path
        )
        daemon = await wait_for_file(pidfile, host_pid, run=handle)
        t0 = time.monotonic()
        result = await handle.cancel()
        took = time.monotonic() - t0
        assert result.failure is not None and result.failure.kind == "cancelled"
        assert result.failure.rung == "exit" and took < 10.0
        assert wait_until(lambda: gone(daemon), 2.0)

        pidfile2 = tmp_path / "daemon2"
        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as tg:

                async def caller() -> None:
                    await sup.run(
                        "x", command=child("daemon_then_wait.py", str(pidfile2)), workspace=tmp_path
                    )

                tg.start_soon(caller)
                daemon2 = await wait_for_file(pidfile2, host_pid)
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        # run() returned only once the child was down: its daemon goes with its namespace.
        assert wait_until(lambda: gone(daemon2), 2.0)


async def test_an_abort_right_after_start_or_while_queued_is_a_prompt_cancelled_result(
    ray_cluster: RayCluster, tmp_path: Path, host_pid: Callable[[Path], int]
) -> None:
    async with placement(ray_cluster, nodes=[ray_cluster.worker], per_node=1) as sup:
        pidfile = tmp_path / "daemon"
        first = await sup.start(
            "x", command=child("daemon_then_wait.py", str(pidfile)), workspace=tmp_path
        )
        queued = await sup.start("x", command=child("answer_and_exit.py"), workspace=tmp_path)
        queued.abort()
        got = await queued.result()
        assert got.failure is not None and got.failure.kind == "cancelled"
        assert "before it was placed" in got.message and queued.node is None
        with anyio.fail_after(30):
            while first.node is None:
                await anyio.sleep(0.01)
        t0 = time.monotonic()
        first.abort()  # placed, perhaps not yet started on its node
        cut = await first.result()
        assert cut.failure is not None and cut.failure.kind == "cancelled"
        assert time.monotonic() - t0 < 8.0, "the node took the abort, no backstop needed"
        if pidfile.exists() and pidfile.read_text():
            daemon = host_pid(pidfile)  # 0: already gone
            assert daemon == 0 or wait_until(lambda: gone(daemon), 2.0)


# --- placement policy -----------------------------------------------------------------------


async def test_a_full_placement_queues_runs_in_order_and_fail_fast_refuses_them(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    async with placement(ray_cluster, nodes=[ray_cluster.worker], per_node=1) as sup:
        first = await sup.start("x", command=child("cancellable.py", "obey"), workspace=tmp_path)
        second = await sup.start("x", command=child("answer_and_exit.py"), workspace=tmp_path)
        await anyio.sleep(1.0)
        assert first.node == ray_cluster.worker and second.node is None  # waiting for the slot
        assert not second.done
        await first.cancel()
        assert (await second.result()).success and second.node == ray_cluster.worker

    async with placement(
        ray_cluster, nodes=[ray_cluster.worker], per_node=1, when_full="fail"
    ) as sup:
        busy = await sup.start("x", command=child("cancellable.py", "obey"), workspace=tmp_path)
        refused = await sup.run("x", command=child("answer_and_exit.py"), workspace=tmp_path)
        assert refused.failure is not None and refused.failure.kind == "spawn_failed"
        assert "every node is running its 1 runs" in refused.message
        await busy.cancel()


async def test_runs_spread_over_the_nodes_and_a_node_label_selects_nodes(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    async with placement(ray_cluster, per_node=3) as sup:
        handles = [
            await sup.start("x", command=child("cancellable.py", "obey"), workspace=tmp_path)
            for _ in range(6)
        ]
        with anyio.fail_after(30):
            while any(h.pid is None for h in handles):
                await anyio.sleep(0.05)
        nodes = [h.node for h in handles]
        for h in handles:
            await h.cancel()
    assert sorted(nodes.count(n) for n in ray_cluster.nodes) == [3, 3]
    labelled = {"ray.io/node-id": ray_cluster.worker}
    async with placement(ray_cluster, nodes=labelled) as sup:
        assert list(sup.hosts) == [ray_cluster.worker]


# --- engine failures are results --------------------------------------------------------------


def assert_lost(
    result: RunResult, node: str, took: float, rungs: tuple[str, ...] = ("none",)
) -> None:
    assert not result.success and result.failure is not None, result
    assert result.failure.kind == "placement_lost", result
    assert node[:12] in result.message, result.message
    assert result.failure.rung in rungs and "last dispose rung" in result.message
    assert took < LOST_BOUND, f"the loss took {took:.1f}s to become a result"
    print(f"[timing] {result.failure.rung}: the loss became a result in {took:.2f}s")


@pytest.mark.parametrize("fault", ["ray.kill", "worker SIGKILL"])
async def test_a_lost_host_is_a_result_its_runs_are_not_moved_and_waiting_runs_go_elsewhere(
    ray_cluster: RayCluster, tmp_path: Path, fault: str, host_pid: Callable[[Path], int]
) -> None:
    import ray

    async with placement(ray_cluster, per_node=1) as sup:
        pidfiles = [tmp_path / "a", tmp_path / "b"]
        a, b = [
            await sup.start("x", command=child("daemon_then_wait.py", str(p)), workspace=tmp_path)
            for p in pidfiles
        ]
        daemons = [
            await wait_for_file(p, host_pid, run=r) for p, r in zip(pidfiles, (a, b), strict=True)
        ]
        queued = await sup.start("x", command=child("answer_and_exit.py"), workspace=tmp_path)
        await anyio.sleep(0.5)
        assert queued.node is None
        doomed = sup.hosts[ray_cluster.worker]
        victim, survivor = (a, b) if a.node == ray_cluster.worker else (b, a)
        daemon = daemons[[a, b].index(victim)]
        assert doomed.info is not None
        t0 = time.monotonic()
        if fault == "ray.kill":
            ray.kill(doomed.actor, no_restart=True)
        else:
            os.kill(doomed.info.pid, signal.SIGKILL)
        lost = await victim.result()
        assert_lost(lost, ray_cluster.worker, time.monotonic() - t0)
        assert wait_until(lambda: gone(daemon), 2.0), "the daemon outlived its host"
        print(f"[timing] {fault}: daemon gone {time.monotonic() - t0:.2f}s after the fault")
        assert wait_until(lambda: gone(doomed.info.pid), 5.0)
        # The lost node left the rotation: the waiting run goes to the node left, once it has
        # room, and the lost run was not started again anywhere.
        assert not queued.done
        await survivor.cancel()
        done = await queued.result()
        assert done.success and queued.node == ray_cluster.head
        assert victim.pid is not None and gone(victim.pid)


DAEMON = """
import os, signal, sys, time
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with open(sys.argv[1], "w") as f:
            f.write(os.readlink("/proc/self"))  # the namespace's pid (`host_pid` maps it)
        time.sleep(120)
    os._exit(0)
# Back only once the first child is past its `setsid` (it exits after forking the daemon): the
# bash tool SIGKILLs this command's process group when it exits, and on a busy host a first
# child not yet in a session of its own died with it, before it could fork the daemon.
os.waitpid(first, 0)
"""


class DaemonThenBusy:
    """A model in the driver whose agent leaves a setsid double-fork daemon behind (through
    the bash tool: the zygote's child's own grandchild), then sits in a long `sleep`."""

    def __init__(self, workspace: Path) -> None:
        self._pidfile = workspace / "daemon.pid"
        (workspace / "daemon.py").write_text(DAEMON)
        self._commands = [
            f"{sys.executable} -I {workspace / 'daemon.py'} {self._pidfile}",
            "sleep 120",
        ]

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        turn = sum(1 for m in params.messages if m.role == "assistant")
        command = self._commands[min(turn, len(self._commands) - 1)]
        call = ToolCall(id=str(turn), name="bash", arguments={"command": command})
        message = ChatMessage(role="assistant", content="", tool_calls=[call])
        return ModelCompleteResult(message=message, usage=Usage(input_tokens=1, output_tokens=1))


async def test_a_zygote_forked_child_and_its_daemon_die_with_their_sigkilled_node_host(
    ray_cluster: RayCluster, tmp_path: Path, host_pid: Callable[[Path], int]
) -> None:
    """A placed run of tether's own child is forked by its node's zygote, which lives in a PID
    namespace of its own: the host's SIGKILL (no ladder runs) still leaves nothing behind —
    the child, its setsid daemon, the zygote and its standby all die with the namespace."""
    model = DaemonThenBusy(tmp_path)
    async with placement(ray_cluster, nodes=[ray_cluster.worker]) as sup:
        started: list[RunStarted] = []
        run = await sup.start(
            "x",
            agent="tester",
            model=model,
            workspace=tmp_path,
            on_event=lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None,
        )
        daemon = await wait_for_file(tmp_path / "daemon.pid", host_pid, run=run)
        host = sup.hosts[ray_cluster.worker].info
        assert host is not None and started and started[0].spawner == "zygote"
        child = started[0].pid
        zygote = psutil.Process(child).ppid()
        namespace = pid_namespace(child)
        assert namespace == pid_namespace(daemon) == pid_namespace(zygote)
        assert namespace != pid_namespace(host.pid)
        in_namespace = [
            p.pid
            for p in psutil.process_iter()
            if not gone(p.pid) and _in_namespace(p.pid, namespace)
        ]
        assert {child, daemon, zygote} <= set(in_namespace)
        t0 = time.monotonic()
        os.kill(host.pid, signal.SIGKILL)
        assert wait_until(lambda: all(gone(pid) for pid in in_namespace), 2.0), [
            pid for pid in in_namespace if not gone(pid)
        ]
        print(f"[timing] host SIGKILL: its namespace was empty {time.monotonic() - t0:.2f}s later")
        lost = await run.result()
        assert_lost(lost, ray_cluster.worker, time.monotonic() - t0)


def _in_namespace(pid: int, namespace: str) -> bool:
    try:
        return pid_namespace(pid) == namespace
    except OSError:
        return False


async def test_a_node_whose_raylet_is_sigkilled_loses_its_runs_and_leaves_nothing_behind(
    ray_cluster: RayCluster, tmp_path: Path, host_pid: Callable[[Path], int]
) -> None:
    from ray._private import ray_constants

    from .conftest import NODE_ARGS

    node = ray_cluster.cluster.add_node(**NODE_ARGS)
    try:
        ray_cluster.cluster.wait_for_nodes()
        node_id = node.node_id
        pidfile = tmp_path / "daemon"
        async with placement(ray_cluster, nodes=[node_id]) as sup:
            run = await sup.start(
                "x", command=child("daemon_then_wait.py", str(pidfile)), workspace=tmp_path
            )
            daemon = await wait_for_file(pidfile, host_pid, run=run)
            host_pid = sup.hosts[node_id].info.pid  # type: ignore[union-attr]
            raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process
            t0 = time.monotonic()
            raylet.send_signal(signal.SIGKILL)
            lost = await run.result()
            # The host sees its raylet die and runs the ladder itself: if its report gets out
            # before the engine declares the node dead, it names the rung ("exit": the child
            # left on its lifeline); otherwise the driver knows of none.
            assert_lost(lost, node_id, time.monotonic() - t0, rungs=("none", "exit"))
            assert wait_until(lambda: gone(daemon), 2.0), "the daemon outlived its node"
            print(f"[timing] raylet: daemon gone {time.monotonic() - t0:.2f}s after the fault")
            assert wait_until(lambda: gone(host_pid), 5.0)
            later = await sup.run("x", command=child("answer_and_exit.py"), workspace=tmp_path)
            assert later.failure is not None and later.failure.kind == "placement_lost"
            assert "no node of the placement is left" in later.message
    finally:
        ray_cluster.cluster.remove_node(node, allow_graceful=False)


DRIVER = textwrap.dedent(
    """
    import json, sys
    import anyio, ray
    from tether.parent import ChildConfig
    from tether.parent.placement import RayPlacement

    address, node, command, workspace = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    command = json.loads(command)
    ray.init(address=address, logging_level="error", log_to_driver=False)

    async def main():
        async with RayPlacement(ChildConfig(), nodes=[node]) as sup:
            run = await sup.start("x", command=command, workspace=workspace)
            while run.pid is None:
                await anyio.sleep(0.02)
            pids = {"host": sup.hosts[node].info.pid, "child": run.pid}
            print("PIDS", json.dumps(pids), flush=True)
            await anyio.sleep(600)

    anyio.run(main)
    """
)


async def test_a_sigkilled_driver_leaves_no_child_no_daemon_and_no_actor(
    ray_cluster: RayCluster, tmp_path: Path, host_pid: Callable[[Path], int]
) -> None:
    pidfile = tmp_path / "daemon"
    command = child("daemon_then_wait.py", str(pidfile))
    errors = (tmp_path / "driver.err").open("wb")
    driver = subprocess.Popen(  # noqa: ASYNC220 — waited for in a thread, killed in finally
        [
            sys.executable,
            "-c",
            DRIVER,
            ray_cluster.cluster.address,
            ray_cluster.worker,
            json.dumps(command),
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=errors,
    )
    errors.close()
    try:
        assert driver.stdout is not None
        out = driver.stdout

        def pids_line() -> bytes:
            # Ray may print its own lines (a dead node's raylet log, say) before ours.
            while (line := out.readline()) and not line.startswith(b"PIDS "):
                pass
            return line

        with anyio.fail_after(60):
            line = await anyio.to_thread.run_sync(pids_line)
        assert line, (tmp_path / "driver.err").read_text()[-3000:]
        pids = json.loads(line[5:])
        daemon = await wait_for_file(pidfile, host_pid)
        assert not gone(daemon) and not gone(pids["child"])
        t0 = time.monotonic()
        driver.kill()
        driver.wait(10)
        assert wait_until(lambda: gone(pids["host"]), LOST_BOUND), "the host outlived its driver"
        host_gone = time.monotonic() - t0
        assert wait_until(lambda: gone(daemon) and gone(pids["child"]), 2.0)
        print(f"[timing] driver SIGKILL: its host was gone after {host_gone:.2f}s")
        assert wait_until(lambda: not live_actors(), 10.0, 0.2), live_actors()
        assert host_gone < LOST_BOUND
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)
        if driver.stdout is not None:
            driver.stdout.close()


async def test_200_children_over_two_nodes_leave_no_process_and_no_actor(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    async with placement(ray_cluster, per_node=16) as sup:
        handles = [
            await sup.start("x", command=child("answer_and_exit.py"), workspace=tmp_path)
            for _ in range(200)
        ]
        results = [await h.result() for h in handles]
    assert sum(r.success for r in results) == 200, {r.message for r in results if not r.success}
    assert {h.node for h in handles} == set(ray_cluster.nodes)
    assert wait_until(lambda: not tether_processes(), 5.0), tether_processes()
    assert wait_until(lambda: not live_actors(), 10.0, 0.2), live_actors()


@pytest.mark.parametrize("hook_fails", [False, True], ids=["answered", "the hook raises"])
async def test_a_request_on_a_runs_stream_is_answered_for_that_run_whatever_it_names(
    hook_fails: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # A host (faked here: no cluster) sends, on run r1's stream, a request naming run r2. The
    # driver answers it with r1's model, and hands the answer back to r1's host; r2's model
    # never hears of it. When the driver's own answering raises (r1's `on_turn` hook), the
    # host is told so (the child gets an error, not silence) and the placement goes on.
    from tether.parent.placement.rayplacement import _Host
    from tether.parent.placement.relay import RunContext
    from tether.parent.placement.wire import Answer, Ask, NodeRun
    from tether.parent.process.limits import Limits
    from tether.parent.run.broker import RunModels
    from tether.protocol import ErrorCode
    from tether.protocol.messages import ChatMessage, ModelCompleteParams, ModelCompleteResult

    class Told:
        def __init__(self, text: str) -> None:
            self.text, self.asked = text, 0

        async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
            self.asked += 1
            return ModelCompleteResult(message=ChatMessage(role="assistant", content=self.text))

    mine, theirs = Told("r1's model"), Told("r2's model")
    answered: list[Answer] = []
    heard = anyio.Event()

    async def ready(value: Any) -> Any:
        return value

    async def stream(spec: NodeRun) -> Any:
        params = ModelCompleteParams(run_id="r2", messages=[ChatMessage(role="user", content="x")])
        yield ready([Ask(7, "r2", "model/complete", params)])
        await heard.wait()
        yield ready([RunFinished(spec.run_id, RunResult(success=True, status="completed"))])

    async def answer(answers: list[Answer]) -> None:
        answered.extend(answers)
        heard.set()

    actor = SimpleNamespace(
        run=SimpleNamespace(remote=stream), answer=SimpleNamespace(remote=answer)
    )
    placement = RayPlacement()
    placement._broker.runs["r2"] = RunContext(RunModels(theirs))
    spec = NodeRun(
        run_id="r1",
        prompt="go",
        agent="general",
        workspace="/",
        description="",
        limits=Limits(),
        config=ChildConfig(),
        models=True,
    )

    async def hook(params: ModelCompleteParams, result: ModelCompleteResult) -> None:
        if hook_fails:
            raise RuntimeError("the caller's hook broke")

    run = RemoteRun(placement, spec, RunContext(RunModels(mine), on_turn=hook))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            placement._tg = tg
            result = await placement._on_node(run, _Host("n1", actor), None)
    assert result.success, result
    [got] = answered
    assert got.id == 7
    assert (mine.asked, theirs.asked) == (1, 0)
    assert run._ctx.brokered.model_calls == 1
    if hook_fails:
        assert got.error == (ErrorCode.INTERNAL_ERROR, "the parent failed to answer")
        assert any(r.exc_info and r.exc_info[0] is RuntimeError for r in caplog.records)
    else:
        assert got.error is None and got.result.message.content == "r1's model"
