"""tether's benchmarks: speed and memory, each figure next to a floor measured in the same run.

`scripts/bench` runs `python -m benchmarks.bench` and writes docs/performance.md. `--quick`
runs every figure with tiny sample counts (for the smoke test); `--out` picks the report path;
`--json` also writes the raw samples.

The machine is shared and noisy, so a tether figure and its floor are measured interleaved:
the figures of one group (say every ping-pong) keep their peers alive and take turns, one
block of samples each per round, so a burst of outside load lands on all of them alike. Times
are `time.perf_counter_ns`, except the crash figure, which spans two processes and uses
CLOCK_MONOTONIC (`time.monotonic_ns`, system-wide on Linux) on both sides.

Everything runs in one anyio (asyncio backend) event loop; the blocking floors simply block it
while they run, which is harmless because nothing else is waiting for it then.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psutil

from benchmarks.egress import egress_group
from benchmarks.fanout import fanout_group
from benchmarks.first_run import first_run_group
from benchmarks.followup import follow_up_group
from benchmarks.gateway import gateway_group
from benchmarks.layered import layered_group
from benchmarks.providers import providers_group
from benchmarks.report import SOAK_HEADING, Figure, Results, render, section, with_section
from benchmarks.traces import traces_group
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import cgroup_join
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig, PoolSpec, pool_key
from tether.parent.process.env import build_child_env
from tether.parent.process.host import host
from tether.parent.process.isolation import choose_level
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.process.spawn import child_env, spawn_child
from tether.parent.process.supervised import SupervisedChild
from tether.parent.process.tree import snapshot
from tether.parent.process.zygote import Zygote, ZygoteSpawner
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import Supervisor
from tether.protocol import (
    ConnectionClosed,
    Decoder,
    Notification,
    decode_params,
    encode_notification,
    encode_request,
    encode_response,
)
from tether.protocol.depth import view_exceeds_depth
from tether.protocol.messages import (
    PROTOCOL_VERSION,
    AgentDefinition,
    AgentEventParams,
    AgentRunParams,
    ChatMessage,
    Empty,
    InitializeParams,
    ModelCompleteParams,
    ModelCompleteResult,
    PeerInfo,
    ToolCall,
    Usage,
)
from tether.protocol.onepass import decode_reply

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHILDREN = HERE / "children"
PY = sys.executable
TETHER_CHILD = list(DEFAULT_COMMAND)
MIB = 1 << 20
STUBBORN_POLICY = DisposePolicy(shutdown=0.1, eof=0.1, term=0.1, kill=2.0)
STUBBORN_GRACE = STUBBORN_POLICY.stubborn_seconds(asked_shutdown=True)
"""A ready child is asked `shutdown`; when it does not answer, the EOF rung waits nothing more."""
ONE_TURN = (
    b'[{"text": "done", "toolCalls": [{"name": "complete",'
    b' "arguments": {"summary": "ok", "paths": []}}]}]'
)
PIPE = subprocess.PIPE


def child_script(name: str, *args: object) -> list[str]:
    return [PY, "-I", str(CHILDREN / name), *map(str, args)]


@dataclass(frozen=True)
class Plan:
    quick: bool = False
    spawns: int = 20
    """Rounds of the spawn group (one sample of each spawn figure per round)."""
    rounds: int = 10
    """Rounds of the ping group; each round takes `round_trips / rounds` samples per figure."""
    round_trips: int = 3000
    transfers: int = 30
    model_calls: int = 2000
    events: int = 200_000
    flood_runs: int = 5
    stubborn: int = 5
    crashes: int = 15
    whole_runs: int = 10
    back_to_back: int = 6
    """Runs one after another through the zygote in each round of the spawn group (the first,
    after a pause, is not counted)."""
    swarm_children: int = 32
    swarm_runs: int = 3
    rss: int = 3
    pooled: int = 20
    follow_ups: int = 200
    """Follow-up messages to live children (spread over `rounds`, a fresh agent each round)."""
    resumes: int = 10
    """Rounds of the cold-resume figures (one sample of each per round)."""
    traced_runs: int = 60
    """Rounds of the traces group (one traced and one untraced run each)."""
    broker_children: int = 256
    """Live children asking for model turns at once (`broker_group`)."""
    broker_phases: int = 3
    broker_seconds: float = 2.0
    broker_pings: int = 20
    fanouts: int = 5
    """Rounds of the fan-out group (one delegated fan-out and one bare one each)."""
    fanout: int = 32
    """Task calls in the orchestrator's one turn (and bare runs started together)."""
    ray_children: int = 256
    ray_runs: int = 15
    fleet: int = 256
    """Live children at once through the zygote (`fleet_group`)."""
    fleet_runs: int = 3
    fleet_stretch: int = 1024
    """The stretch line's children (0: none)."""
    egress_rounds: int = 10
    """Rounds of the egress group (a block of small requests and three downloads each)."""
    egress_requests: int = 200
    """Small requests per round and way (direct, through the proxy)."""
    gateway_rounds: int = 10
    """Rounds of the gateway group (a block of model calls direct and through the gateway)."""
    gateway_calls: int = 200
    layer_files: int = 10_000
    """The base of the layered group's layer and change-set figures."""
    first_runs: int = 8
    """Rounds of the first-run group (a fresh process's first run each way, `tether run`)."""
    only: tuple[str, ...] = ()
    """Run only these groups (by name, as printed); empty: every group."""

    @classmethod
    def make(cls, quick: bool) -> Plan:
        if not quick:
            return cls()
        return cls(
            quick=True,
            spawns=2,
            rounds=2,
            round_trips=60,
            transfers=2,
            model_calls=40,
            events=2000,
            flood_runs=2,
            stubborn=2,
            crashes=2,
            whole_runs=2,
            back_to_back=2,
            swarm_children=4,
            swarm_runs=1,
            rss=2,
            pooled=2,
            follow_ups=4,
            resumes=2,
            traced_runs=2,
            fanouts=1,
            fanout=4,
            broker_children=8,
            broker_phases=2,
            broker_seconds=0.3,
            broker_pings=5,
            ray_children=4,
            ray_runs=2,
            fleet=8,
            fleet_runs=1,
            fleet_stretch=0,
            egress_rounds=2,
            egress_requests=20,
            gateway_rounds=2,
            gateway_calls=20,
            layer_files=1_000,
            first_runs=1,
        )


class Samples(defaultdict[str, list[float]]):
    def __init__(self) -> None:
        super().__init__(list)


def ms(ns: float) -> float:
    return ns / 1e6


def us(ns: float) -> float:
    return ns / 1e3


def mb_per_s(nbytes: int, ns: float) -> float:
    return nbytes / 1e6 / (ns / 1e9)


# --- peers: floors ------------------------------------------------------------------------------


def _readline(fd: int) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        data = os.read(fd, 65536)
        if not data:
            raise RuntimeError("a floor child closed its stdout")
        buf += data
    return buf


def _ping_line(i: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping", "params": {}}).encode() + b"\n"


@contextlib.contextmanager
def popen(argv: Sequence[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A plain child with pipes on stdin/stdout; on the way out, EOF and wait."""
    proc = subprocess.Popen(argv, stdin=PIPE, stdout=PIPE)
    try:
        yield proc
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _fds(proc: subprocess.Popen[bytes]) -> tuple[int, int]:
    assert proc.stdin is not None and proc.stdout is not None
    return proc.stdin.fileno(), proc.stdout.fileno()


@contextlib.asynccontextmanager
async def aio_popen(argv: Sequence[str]) -> AsyncIterator[asyncio.subprocess.Process]:
    """The same, with asyncio subprocess streams."""
    proc = await asyncio.create_subprocess_exec(*argv, stdin=PIPE, stdout=PIPE, limit=1 << 20)
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        with anyio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def aio_pingpong(proc: asyncio.subprocess.Process, ids: range) -> list[float]:
    assert proc.stdin is not None and proc.stdout is not None
    times = []
    for i in ids:
        t0 = time.perf_counter_ns()
        proc.stdin.write(_ping_line(i))
        await proc.stdin.drain()
        json.loads(await proc.stdout.readline())
        times.append(us(time.perf_counter_ns() - t0))
    return times


def blocking_pingpong(proc: subprocess.Popen[bytes], ids: range) -> list[float]:
    w, r = _fds(proc)
    times = []
    for i in ids:
        t0 = time.perf_counter_ns()
        os.write(w, _ping_line(i))
        json.loads(_readline(r))
        times.append(us(time.perf_counter_ns() - t0))
    return times


def _memory(pid: int) -> tuple[float, float]:
    info = psutil.Process(pid).memory_full_info()
    return info.rss / MIB, info.uss / MIB


# --- peers: tether ------------------------------------------------------------------------------


def _init_params() -> InitializeParams:
    return InitializeParams(protocol_version=PROTOCOL_VERSION, client_info=PeerInfo(name="bench"))


@contextlib.asynccontextmanager
async def tethered(
    argv: Sequence[str],
    *,
    policy: DisposePolicy | None = None,
    zygote: Zygote | None = None,
    sandbox: str | None = None,
) -> AsyncIterator[SupervisedChild]:
    """A live child spawned and held the way `Supervisor` does it: `spawn_child` (a cgroup of
    its own on a cgroup tier; forked by `zygote` when given, as `spawner="zygote"` does) and the
    child's context (reader, stderr drain, exit watch; dispose on the way out). `sandbox`: a
    workspace, and the child gets the sandbox plan for it (computed inside the measured time,
    as `Supervisor` does)."""
    cfg = ChildConfig(command=tuple(argv), dispose=policy or DisposePolicy())
    child = await spawn_child(
        cfg,
        Limits(),
        host(),
        "bench",
        spawner=ZygoteSpawner(lambda: zygote, skip=len(argv)) if zygote is not None else None,
        workspace=sandbox,
        level="sandbox" if sandbox else "process",
    )
    async with child:
        yield child


async def initialize(child: SupervisedChild) -> None:
    """The handshake; a child that dies instead of answering is an error that shows its stderr."""
    try:
        await child.session.initialize(_init_params())
        child.ready = True
    except ConnectionClosed as exc:
        await anyio.sleep(0.1)
        tail = child.stderr.tail(2000)
        raise RuntimeError(f"the child ended before answering initialize ({exc}): {tail}") from exc


async def tether_pings(child: SupervisedChild, n: int, params: Any = None) -> list[float]:
    params = Empty() if params is None else params
    times: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await child.endpoint.request_raw("ping", params)
        times.append(time.perf_counter_ns() - t0)
    return times


async def tether_runs(child: SupervisedChild, n: int, workspace: str, first: int) -> list[float]:
    """`agent/run` round trips against the tiny agent, each a new run id."""
    times: list[float] = []
    for i in range(first, first + n):
        params = AgentRunParams(run_id=f"r{i}", prompt="go", workspace=workspace)
        t0 = time.perf_counter_ns()
        result = await child.session.run(params)
        times.append(time.perf_counter_ns() - t0)
        assert result.success, result.message
    return times


class FixedModel:
    """A model provider that answers every turn at once with the same short message."""

    def __init__(self) -> None:
        self.answer = ModelCompleteResult(
            message=ChatMessage(role="assistant", content="hi"), usage=Usage(1, 1)
        )

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        return self.answer


# --- group: spawn, ready, exit, dispose ---------------------------------------------------------


def floor_spawn_round(s: Samples) -> None:
    """One sample of each spawn floor (blocking: the event loop has nothing else to do)."""
    t0 = time.perf_counter_ns()
    subprocess.Popen([PY, "-I", "-c", "pass"]).wait()
    s["floor.spawn_exit"].append(ms(time.perf_counter_ns() - t0))

    t0 = time.perf_counter_ns()
    with popen(child_script("floor_bare.py")) as proc:
        _readline(_fds(proc)[1])
        s["floor.spawn_line"].append(ms(time.perf_counter_ns() - t0))
        time.sleep(0.02)
        assert proc.stdin is not None
        t1 = time.perf_counter_ns()
        proc.stdin.close()
        proc.wait()
        s["floor.eof_exit"].append(ms(time.perf_counter_ns() - t1))

    t0 = time.perf_counter_ns()
    with popen(child_script("floor_bare.py", *REQUIRED_LIBRARIES)) as proc:
        _readline(_fds(proc)[1])
        s["context.libs_spawn_line"].append(ms(time.perf_counter_ns() - t0))


REQUIRED_LIBRARIES = ("anyio", "msgspec", "asyncio", "anyio._backends._asyncio")
"""What any child on tether's required stack imports before its first line: its async code is
anyio on asyncio, every wire type msgspec."""


PROCESS = ChildConfig(isolation="process", spawner="exec")
SANDBOX = ChildConfig(isolation="sandbox", spawner="exec")
"""Cold spawns, pinned: the default spawner forks tether's own child from the zygote."""


async def spawn_group(res: Results, p: Plan, workspace: str) -> None:
    s = Samples()
    model = ScriptedModel.from_json(ONE_TURN)
    sandbox = choose_level("auto").level == "sandbox"
    zygote = await Zygote.start(build_child_env(os.environ))
    try:
        async with (
            Supervisor(dataclasses.replace(PROCESS, spawner="zygote")) as zsup,
            Supervisor(
                dataclasses.replace(SANDBOX if sandbox else PROCESS, spawner="zygote")
            ) as zsbx,
        ):
            await _spawn_rounds(s, p, workspace, model, zygote, zsup, zsbx, sandbox)
    finally:
        await zygote.aclose()
    _spawn_figures(res, p, s)


async def _spawn_rounds(
    s: Samples,
    p: Plan,
    workspace: str,
    model: Any,
    zygote: Zygote,
    zsup: Supervisor,
    zsbx: Supervisor,
    sandbox: bool,
) -> None:
    ws = workspace if sandbox else None
    the_host = host()
    for rnd in range(p.spawns + 1):  # round 0 warms the page cache and is dropped
        floor_spawn_round(s)
        join = cgroup_join.measure(the_host, samples=1)
        if join is not None:
            s["context.cgroup_join"].append(join)
        for key, argv, by, sbx in (
            ("tether", TETHER_CHILD, None, None),
            ("tether.zygote", TETHER_CHILD, zygote, None),
            ("tether.sandbox", TETHER_CHILD, None, ws),
            ("tether.zygote_sandbox", TETHER_CHILD, zygote, ws),
            ("context.minimal", child_script("proto.py", "serve"), None, None),
        ):
            if key.endswith("sandbox") and not sandbox:
                continue
            t0 = time.perf_counter_ns()
            async with tethered(argv, zygote=by, sandbox=sbx) as child:
                await initialize(child)
                s[f"{key}.spawn_ready"].append(ms(time.perf_counter_ns() - t0))
                await anyio.sleep(0.02)
                t1 = time.perf_counter_ns()
                report = await child.dispose()
                s[f"{key}.dispose_polite"].append(ms(time.perf_counter_ns() - t1))
                s[f"{key}.rung"].append(float(report.rung == "shutdown"))
        s["context.zygote_spawn_exit"].append(await _spawn_then_exit(zygote))
        s["context.zygote_first_run"].append(await _first_run(zygote, workspace))
        if rnd <= p.whole_runs:
            for key, cfg in (("", PROCESS), ("_sandbox", SANDBOX)):
                if key and not sandbox:
                    continue
                async with Supervisor(cfg) as sup:
                    t0 = time.perf_counter_ns()
                    result = await sup.run("bench", model=model, workspace=workspace)
                    s[f"context.run_one{key}"].append(ms(time.perf_counter_ns() - t0))
                assert result.success, result.message
        # Through the zygote in every round: its median of 10 moved by a fifth between runs.
        for key, zs in (("", zsup), ("_sandbox", zsbx)):
            if key and not sandbox:
                continue
            t0 = time.perf_counter_ns()
            result = await zs.run("bench", model=model, workspace=workspace)
            s[f"context.run_one_zygote{key}"].append(ms(time.perf_counter_ns() - t0))
            assert result.success, result.message
        # Then runs one after another, as a loop over tasks makes them: each spawn comes a run
        # after the one before, sooner than a standby parks.
        for key, zs in (("", zsup), ("_sandbox", zsbx)):
            if key and not sandbox:
                continue
            for i in range(p.back_to_back):
                t0 = time.perf_counter_ns()
                result = await zs.run("bench", model=model, workspace=workspace)
                if i:
                    s[f"context.run_back_to_back{key}"].append(ms(time.perf_counter_ns() - t0))
                assert result.success, result.message
        if rnd == 0:
            s.clear()


async def _spawn_then_exit(zygote: Zygote) -> float:
    """A zygote child's spawn → ready plus its own exit, with nothing between: what a whole
    run cannot do without (the result carries the exit status), in ms."""
    t0 = time.perf_counter_ns()
    async with tethered(TETHER_CHILD, zygote=zygote) as child:
        await initialize(child)
        ready = time.perf_counter_ns() - t0
        await child.session.shutdown()
        t1 = time.perf_counter_ns()
        await child.session.exit()
        exited = await child.proc.wait_for(5.0)
        gone = time.perf_counter_ns() - t1
    assert exited, "the zygote child did not exit on `exit`"
    return ms(ready + gone)


COMPLETE_TURN = ModelCompleteResult(
    message=ChatMessage(
        role="assistant",
        content="done",
        tool_calls=[ToolCall(id="c1", name="complete", arguments={"summary": "ok", "paths": []})],
    ),
    usage=Usage(1, 1),
)


async def _first_run(zygote: Zygote, workspace: str) -> float:
    """A fresh zygote child's first `agent/run` of the whole run's agent (one model turn,
    answered at once with the `complete` call, then the result), in ms: what a whole run
    adds to its bound that a run cannot skip, paid in a process that has run nothing yet."""

    async def answer(method: str, params: Any) -> Any:
        assert method == "model/complete", method
        return COMPLETE_TURN

    await zygote.parked(within=1.0)  # handed to a standby, as the whole run's child is
    async with tethered(TETHER_CHILD, zygote=zygote) as child:
        child.serve_with(answer, lambda method, params: None)
        await initialize(child)
        run = AgentRunParams(run_id="first", prompt="bench", workspace=workspace)
        t0 = time.perf_counter_ns()
        result = await child.session.run(run)
        took = time.perf_counter_ns() - t0
    assert result.success, result.message
    return ms(took)


def _spawn_figures(res: Results, p: Plan, s: Samples) -> None:
    res.add(
        Figure(
            "floor.spawn_exit",
            "`python -I -c pass`, spawn to exit",
            "ms",
            s["floor.spawn_exit"],
            "from just before `subprocess.Popen` to `wait()` returning",
        )
    )
    res.add(
        Figure(
            "floor.spawn_line",
            "bare `python -I` child, spawn to its first line",
            "ms",
            s["floor.spawn_line"],
            "`benchmarks/children/floor_bare.py`: from just before `subprocess.Popen` to its "
            "first stdout line read by the parent",
        )
    )
    res.add(
        Figure(
            "floor.eof_exit",
            "bare `python -I` child, exit on stdin EOF",
            "ms",
            s["floor.eof_exit"],
            "the same child, blocked in `sys.stdin.buffer.read()` for 20 ms; from closing its "
            "stdin to `wait()` returning (interpreter shutdown included)",
        )
    )
    res.add(
        Figure(
            "context.libs_spawn_line",
            "`python -I` child importing anyio + msgspec + asyncio's backend, spawn to its first "
            "line",
            "ms",
            s["context.libs_spawn_line"],
            "`floor_bare.py` importing the libraries tether's child is built on (anyio, msgspec, "
            "asyncio, anyio's asyncio backend) before its first line; no tether code, no "
            "trampoline: the lower bound of a cold start on this stack",
            floor="floor.spawn_line",
        )
    )
    res.add(
        Figure(
            "tether.spawn_ready",
            "cold spawn → ready (`initialize` answered)",
            "ms",
            s["tether.spawn_ready"],
            "from just before the child's cgroup is created and `spawn_child` is called (the "
            "trampoline, then `python -I -m tether.child`) to the typed `initialize` result in "
            "the parent; the child is driven the way `Supervisor` drives it",
            floor="floor.spawn_line",
        )
    )
    res.add(
        Figure(
            "tether.zygote_spawn_ready",
            "zygote spawn → ready (`initialize` answered)",
            "ms",
            s["tether.zygote.spawn_ready"],
            'as the cold spawn, with the child forked by a zygote (`spawner="zygote"`, the '
            "zygote started once beforehand): from just before the child's cgroup is created to "
            "the `initialize` result; the fork, the forked child's set-up (cgroup, session, "
            "death signal, rlimits, signals, environment) and the handshake; process isolation",
            floor="floor.spawn_line",
        )
    )
    if s["tether.sandbox.spawn_ready"]:
        res.add(
            Figure(
                "tether.sandbox_spawn_ready",
                "cold spawn → ready, sandboxed",
                "ms",
                s["tether.sandbox.spawn_ready"],
                "as the cold spawn, with the sandbox: the plan computed in the parent, then in "
                "the trampoline the private mount namespace (idmapped workspace, private temp "
                "dirs, covered home directories), the uid change, Landlock and seccomp",
                floor="tether.spawn_ready",
            )
        )
        res.add(
            Figure(
                "tether.zygote_sandbox_spawn_ready",
                "zygote spawn → ready, sandboxed",
                "ms",
                s["tether.zygote_sandbox.spawn_ready"],
                "as the zygote spawn, with the same sandbox set up in the forked child",
                floor="tether.zygote_spawn_ready",
            )
        )
    polite = s["tether.rung"]
    res.add(
        Figure(
            "tether.dispose_polite",
            "dispose of a polite tether child",
            "ms",
            s["tether.dispose_polite"],
            "the child of the cold-spawn figure, initialized and idle for 20 ms; "
            "`SupervisedChild.dispose()` (polite: the child answered `initialize`) from the "
            "call to its return (`shutdown` answered, "
            "`exit`, stdin closed, exit seen on the pidfd, tree sweep, reap, stderr settled, "
            "pipes closed)",
            floor="floor.eof_exit",
            note=f"{sum(polite):.0f} of {len(polite)} ended at the `shutdown` rung",
        )
    )
    if s["context.cgroup_join"]:
        res.add(
            Figure(
                "context.cgroup_join",
                "a fresh process joins a fresh cgroup (every hierarchy a child joins)",
                "ms",
                s["context.cgroup_join"],
                "`tether.parent.process.cgroup_join.measure`: a `python -I -S` child writes its "
                "pid to each `cgroup.procs` of a new cgroup on the tier in use and times the "
                "writes; part of every spawn above (trampoline or forked child). Without the "
                "cgroup2 mount option `favordynmods` the first write waits for an RCU grace period",
                floor="tether.zygote_spawn_ready",
            )
        )
    res.add(
        Figure(
            "context.spawn_ready_minimal",
            "cold spawn → ready, minimal protocol child",
            "ms",
            s["context.minimal.spawn_ready"],
            "as the tether cold spawn, with `benchmarks/children/proto.py` (stdlib, "
            "tether.protocol and msgspec, blocking I/O) in place of `python -I -m tether.child`: "
            "what the trampoline, spawn and handshake cost without the child runtime's imports",
            floor="floor.spawn_line",
        )
    )
    res.add(
        Figure(
            "context.dispose_minimal",
            "dispose of the minimal protocol child",
            "ms",
            s["context.minimal.dispose_polite"],
            "as the polite dispose, with the minimal child (answers `shutdown`, exits on `exit` "
            "with `os._exit`)",
            floor="floor.eof_exit",
        )
    )

    res.add(
        Figure(
            "context.run_one",
            "one whole run: `Supervisor.run` of a one-turn `complete`",
            "ms",
            s["context.run_one"],
            "spawn (with its cgroup), handshake, `agent/run`, one scripted `model/complete`, "
            "the `complete` tool, the result, polite dispose; from the `run()` call to its "
            f"return; one per round for the first {p.whole_runs} rounds; process isolation",
            floor="tether.spawn_ready",
        )
    )
    if s["context.run_one_sandbox"]:
        res.add(
            Figure(
                "context.run_one_sandbox",
                "one whole run, sandboxed",
                "ms",
                s["context.run_one_sandbox"],
                "as the whole run, with `isolation='sandbox'`, measured right after it",
                floor="context.run_one",
            )
        )
    res.add(
        Figure(
            "context.run_one_zygote",
            "one whole run through the zygote",
            "ms",
            s["context.run_one_zygote"],
            'as the whole run, in `Supervisor(ChildConfig(spawner="zygote"))` (one supervisor '
            "for all rounds, its zygote started in the dropped round 0), one in every round; "
            "process isolation",
            floor="context.run_one",
        )
    )
    res.add(
        Figure(
            "context.zygote_spawn_exit",
            "a zygote child's spawn → ready and its exit, nothing between",
            "ms",
            s["context.zygote_spawn_exit"],
            "as the zygote spawn → ready, plus, once `shutdown` is answered, from sending "
            "`exit` to the exit seen on the pidfd (the child's `os._exit` and the kernel "
            "unmapping its copy of the zygote's address space); no run, no sweep, no reap",
            floor="tether.zygote_spawn_ready",
        )
    )
    res.add(
        Figure(
            "context.zygote_first_run",
            "a fresh zygote child's first `agent/run`",
            "ms",
            s["context.zygote_first_run"],
            "a child the zygote handed to its parked standby (as the whole run's child is), "
            "initialized, then its "
            "first `agent/run` of the whole run's agent: one `model/complete` answered at once "
            "with the `complete` call, the tool, the result; from the request to the typed "
            "result. Part of every whole run, not of its bound (the process has run nothing "
            "yet: its first touches of the pages a run writes are in it)",
            floor="context.run_one_zygote",
        )
    )
    res.add(
        Figure(
            "context.zygote_run_unavoidable",
            "a zygote child's spawn → ready, its first `agent/run` and its exit",
            "ms",
            [
                a + b
                for a, b in zip(
                    s["context.zygote_spawn_exit"], s["context.zygote_first_run"], strict=True
                )
            ],
            "per round, the sum of the two figures above: what no whole run through the zygote "
            "does without (a fresh child made ready, the run itself, the exit its result "
            "reports); what the whole run takes beyond it is tether's own (the plan, the run "
            "record, the `shutdown` round trip, the verdict, the result)",
            floor="context.run_one_zygote",
        )
    )
    if s["context.run_one_zygote_sandbox"]:
        res.add(
            Figure(
                "context.run_one_zygote_sandbox",
                "one whole run through the zygote, sandboxed",
                "ms",
                s["context.run_one_zygote_sandbox"],
                "as the zygote's whole run, with `isolation='sandbox'`",
                floor="context.run_one_zygote",
            )
        )
    for key, level, floor in (
        ("", "process isolation", "context.run_one_zygote"),
        ("_sandbox", "sandboxed", "context.run_one_zygote_sandbox"),
    ):
        if s[f"context.run_back_to_back{key}"]:
            res.add(
                Figure(
                    f"context.run_back_to_back{key}",
                    f"one run of {p.back_to_back} back to back through the zygote, {level}",
                    "ms",
                    s[f"context.run_back_to_back{key}"],
                    f"in every round, after the whole run above, the same supervisor runs "
                    f"{p.back_to_back} whole runs one after another; each but the first (which "
                    "follows a pause) is a sample: its spawn comes one run after the last, "
                    "sooner than a standby parks",
                    floor=floor,
                )
            )


# --- group: the warm pool -----------------------------------------------------------------------


async def pool_group(res: Results, p: Plan, workspace: str) -> None:
    """acquire → ready: what a run that matches the pool pays before `agent/run` can go out."""
    s = Samples()
    async with Supervisor(pool=PoolSpec(1, workspace=workspace)) as sup:
        pool = sup.pool
        assert pool is not None
        cfg, limits = sup.config, Limits()
        level = choose_level(cfg.isolation).level
        for _ in range(p.pooled + 1):
            with anyio.fail_after(30):
                await pool.wait_ready()
            t0 = time.perf_counter_ns()
            key = pool_key(cfg, limits, sup.host, level, str(Path(workspace).resolve()))
            env = child_env(cfg)
            t1 = time.perf_counter_ns()
            pooled = pool.acquire(key, env)
            t2 = time.perf_counter_ns()
            assert pooled is not None
            s["tether.pool_acquire"].append((t2 - t0) / 1e3)
            s["context.pool_handover"].append((t2 - t1) / 1e3)
            await pooled.finish()
    del s["tether.pool_acquire"][0]
    del s["context.pool_handover"][0]
    res.add(
        Figure(
            "tether.pool_acquire",
            "warm pool: acquire → ready",
            "µs",
            s["tether.pool_acquire"],
            "`Supervisor(pool=PoolSpec(1, workspace=...))`: what a matching run does before its "
            "`agent/run` "
            "can go out: the pool key, the child's environment built again and compared, the "
            "liveness check (`waitid` WNOWAIT) and the hand-over of an initialized child; each "
            "sample waits for the pool to refill first (a child serves one run)",
        )
    )
    res.add(
        Figure(
            "context.pool_handover",
            "warm pool: the hand-over alone",
            "µs",
            s["context.pool_handover"],
            "the same samples' `pool.acquire(key, env)` alone, with the pool key and the "
            "child's environment already built: the liveness check, the comparison and the "
            "hand-over",
            floor="tether.pool_acquire",
        )
    )


# --- group: small round trips -------------------------------------------------------------------


async def ping_group(res: Results, p: Plan, workspace: str) -> None:
    s = Samples()
    per = max(1, p.round_trips // p.rounds)
    model_per = max(1, p.model_calls // p.rounds)
    warm = max(5, per // 10)
    init = {"protocolVersion": 1, "clientInfo": {"name": "floor"}}
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
    async with contextlib.AsyncExitStack() as stack:
        blocking = stack.enter_context(popen(child_script("floor_echo_blocking.py")))
        aio = await stack.enter_async_context(aio_popen(child_script("floor_echo_asyncio.py")))
        aio_tether = await stack.enter_async_context(aio_popen(TETHER_CHILD))
        tether = await stack.enter_async_context(tethered(TETHER_CHILD))
        minimal = await stack.enter_async_context(tethered(child_script("proto.py", "serve")))
        tiny = await stack.enter_async_context(
            tethered([*TETHER_CHILD, "--agent", f"{CHILDREN / 'tiny_agent.py'}:make"])
        )
        _readline(_fds(blocking)[1])
        assert aio.stdout is not None
        assert aio_tether.stdin is not None and aio_tether.stdout is not None
        await aio.stdout.readline()
        aio_tether.stdin.write(json.dumps(hello).encode() + b"\n")
        await aio_tether.stdout.readline()
        await initialize(tether)
        await initialize(minimal)
        await initialize(tiny)

        async def tiny_runs(n: int, first: int) -> dict[str, list[float]]:
            # A `ping` and a run in turn, sample by sample, so each pair sees the same moment
            # of a shared host; in blocks of `n` the two medians of one round were 1.12 to
            # 2.23 times apart. Neither carries a cost into the other (benchmarks/notes.md).
            pings: list[float] = []
            runs: list[float] = []
            for i in range(first, first + n):
                pings.extend(us(x) for x in await tether_pings(tiny, 1))
                runs.extend(us(x) for x in await tether_runs(tiny, 1, workspace, i))
            return {"context.ping_tiny": pings, "tether.agent_run": runs}

        async def floors(n: int, first: int) -> dict[str, list[float]]:
            return {"floor.pingpong_blocking": blocking_pingpong(blocking, range(n))}

        async def floor_aio(n: int, first: int) -> dict[str, list[float]]:
            return {"floor.pingpong_asyncio": await aio_pingpong(aio, range(n))}

        async def pings(n: int, first: int) -> dict[str, list[float]]:
            return {"tether.ping": [us(x) for x in await tether_pings(tether, n)]}

        async def parent_side(n: int, first: int) -> dict[str, list[float]]:
            pings = [us(x) for x in await tether_pings(minimal, n)]
            return {"context.ping_parent_side": pings}

        async def child_side(n: int, first: int) -> dict[str, list[float]]:
            ids = range(first + 1, first + 1 + n)
            return {"context.ping_child_side": await aio_pingpong(aio_tether, ids)}

        async def model_turns(n: int, first: int) -> dict[str, list[float]]:
            # One run of its own per round; its child times the turns, the first `warm`
            # of them dropped.
            turns = warm + model_per
            async with Supervisor() as sup:
                result = await sup.run(
                    "bench",
                    model=FixedModel(),
                    workspace=workspace,
                    command=child_script("proto.py", "model", turns),
                    # every request is a turn: the parent enforces the definition's budget
                    agent=AgentDefinition(type="general", max_iterations=turns),
                )
            assert result.success, result.message
            return {"tether.model_complete": [us(x) for x in json.loads(result.summary)[warm:]]}

        for rnd in range(p.rounds + 1):  # round 0 warms every peer up and is dropped
            n = warm if rnd == 0 else per
            first = rnd * per
            # Each round starts one step later: what ran just before a figure (another pair
            # of processes busy on both cores, or this child idle for a while) moved its
            # median by up to a fifth here, so every figure takes every place in turn (the
            # model turns too: always last, their ratio to the floor read 1.08x and 1.34x in
            # two runs of the same code).
            steps = [tiny_runs, floors, floor_aio, pings, parent_side, child_side, model_turns]
            got: dict[str, list[float]] = {}
            for i in range(len(steps)):
                got.update(await steps[(rnd + i) % len(steps)](n, first))
            if rnd > 0:
                for key, values in got.items():
                    s[key].extend(values)

    res.add(
        Figure(
            "floor.pingpong_blocking",
            "ping-pong, blocking os.read/os.write both ends",
            "µs",
            s["floor.pingpong_blocking"],
            "one small JSON-RPC-shaped line each way (stdlib `json` at both ends, "
            "`benchmarks/children/floor_echo_blocking.py`); from before encoding the request to "
            "after decoding the reply",
        )
    )
    res.add(
        Figure(
            "floor.pingpong_asyncio",
            "ping-pong, asyncio streams both ends",
            "µs",
            s["floor.pingpong_asyncio"],
            "as the blocking ping-pong, with asyncio subprocess streams in the parent and "
            "asyncio pipe streams in the child (`readline`, `write` + `drain`; "
            "`floor_echo_asyncio.py`)",
        )
    )
    res.add(
        Figure(
            "tether.ping",
            "`ping` round trip, parent → tether child",
            "µs",
            s["tether.ping"],
            "`SupervisedChild.endpoint.request('ping')` on one live, initialized "
            "`python -I -m tether.child`: "
            "from the call to its typed result",
            floor="floor.pingpong_asyncio",
        )
    )
    res.add(
        Figure(
            "tether.model_complete",
            "`model/complete` round trip, child → parent",
            "µs",
            s["tether.model_complete"],
            "timed inside `benchmarks/children/proto.py` (blocking I/O, tether.protocol codec) "
            "from before encoding the request to after decoding the reply; the parent side is "
            "the real `Supervisor.run` (endpoint, the broker, a model provider that answers "
            "at once, so the request is served in the reader's own task); one run per round",
            floor="floor.pingpong_asyncio",
        )
    )
    res.add(
        Figure(
            "context.ping_tiny",
            "`ping` round trip, to the child of the `agent/run` figure",
            "µs",
            s["context.ping_tiny"],
            "as the `ping` figure, to `python -I -m tether.child --agent "
            "benchmarks/children/tiny_agent.py:make`, in turn with its `agent/run` samples, one "
            "of each at a time",
            floor="floor.pingpong_asyncio",
        )
    )
    res.add(
        Figure(
            "tether.agent_run",
            "`agent/run` round trip, a tiny agent",
            "µs",
            s["tether.agent_run"],
            "`ChildSession.run` (a new run id each time) on one live, initialized child hosting "
            "`benchmarks/children/tiny_agent.py` (it finishes at once): from the call to the "
            "typed `RunResult`; the run's set-up in the child (workspace, tools, context), its "
            "`started` event and the result; each sample taken right after a `ping` to the "
            "same child (the two in turn)",
            floor="context.ping_tiny",
        )
    )
    res.add(
        Figure(
            "context.ping_parent_side",
            "`ping`, tether parent → minimal blocking child (the parent's share)",
            "µs",
            s["context.ping_parent_side"],
            "`SupervisedChild.endpoint.request('ping')` as in the tether figure, answered by "
            "`benchmarks/children/proto.py` (blocking os.read/os.write, tether.protocol codec)",
            floor="floor.pingpong_asyncio",
        )
    )
    res.add(
        Figure(
            "context.ping_child_side",
            "`ping`, bare asyncio parent → tether child (the child's share)",
            "µs",
            s["context.ping_child_side"],
            "the asyncio floor's parent (stdlib `json`, asyncio streams, no trampoline) "
            "driving `python -I -m tether.child` after a hand-written `initialize`",
            floor="floor.pingpong_asyncio",
        )
    )


# --- group: 1 MiB messages ----------------------------------------------------------------------


def raw_transfer(proc: subprocess.Popen[bytes], mode: str, blob: bytes) -> float:
    w, r = _fds(proc)
    t0 = time.perf_counter_ns()
    if mode == "p2c":
        view = memoryview(blob)
        while view:
            view = view[os.write(w, view) :]
        os.read(r, 1)
    else:
        os.write(w, b"g")
        got = 0
        while got < len(blob):
            got += len(os.read(r, MIB))
    return mb_per_s(len(blob), time.perf_counter_ns() - t0)


def line_codec_ns(pad: str) -> int:
    """In this process: the `bigpong` child's encode of its reply, then the parent's depth
    check and one typed decode of that line, as its reader does them in place; in ns."""
    t0 = time.perf_counter_ns()
    line = encode_response(7, {"pad": pad})
    view = memoryview(line)[:-1]  # the framer hands the decoder the line without its newline
    deep = view_exceeds_depth(view)
    ok, _ = decode_reply(view, 7, "ping")
    took = time.perf_counter_ns() - t0
    assert ok and not deep
    return took


async def transfer_group(res: Results, p: Plan) -> None:
    s = Samples()
    blob = b"x" * MIB
    pad = {"pad": "x" * MIB}
    async with contextlib.AsyncExitStack() as stack:
        raw = {
            mode: stack.enter_context(popen(child_script("floor_pipe.py", mode, MIB)))
            for mode in ("p2c", "c2p")
        }
        p2c = await stack.enter_async_context(tethered(TETHER_CHILD))
        c2p = await stack.enter_async_context(tethered(child_script("proto.py", "bigpong", MIB)))
        for proc in raw.values():
            _readline(_fds(proc)[1])
        await initialize(p2c)
        await initialize(c2p)
        for rnd in range(p.transfers + 2):  # two warm-up rounds, dropped
            got = {
                "floor.transfer_p2c": raw_transfer(raw["p2c"], "p2c", blob),
                "floor.transfer_c2p": raw_transfer(raw["c2p"], "c2p", blob),
                "tether.transfer_p2c": mb_per_s(MIB, (await tether_pings(p2c, 1, pad))[0]),
                "tether.transfer_c2p": mb_per_s(MIB, (await tether_pings(c2p, 1))[0]),
            }
            # The raw pipe's own time for this round plus the line's encode and decode, which
            # tether cannot overlap with the transfer (the reply is whole before its first
            # byte goes out, and decoded after its last one comes in).
            raw_ns = MIB / got["floor.transfer_c2p"] * 1e3
            got["context.transfer_c2p_codec"] = mb_per_s(MIB, raw_ns + line_codec_ns(pad["pad"]))
            if rnd >= 2:
                for key, value in got.items():
                    s[key].append(value)
    res.add(
        Figure(
            "floor.transfer_p2c",
            "raw 1 MiB over a pipe, parent → child",
            "MB/s",
            s["floor.transfer_p2c"],
            "blocking os.write of 1 MiB (`floor_pipe.py p2c`), the child reads all of it and "
            "writes one byte back; from the first write to that byte read; MB/s = 2^20 bytes / "
            "that time",
        )
    )
    res.add(
        Figure(
            "floor.transfer_c2p",
            "raw 1 MiB over a pipe, child → parent",
            "MB/s",
            s["floor.transfer_c2p"],
            "the parent writes one byte, the child answers with 1 MiB in blocking os.write "
            "calls (`floor_pipe.py c2p`); from that byte written to the last byte of the MiB "
            "read",
        )
    )
    res.add(
        Figure(
            "tether.transfer_p2c",
            "1 MiB message, parent → tether child",
            "MB/s",
            s["tether.transfer_p2c"],
            "a `ping` whose params carry a 1 MiB `pad` string, to `python -I -m tether.child` "
            "(it frames and decodes the whole line; the typed decode skips the unknown member); "
            "from the request call to its typed `{}` result",
            floor="floor.transfer_p2c",
        )
    )
    res.add(
        Figure(
            "tether.transfer_c2p",
            "1 MiB message, child → parent",
            "MB/s",
            s["tether.transfer_c2p"],
            "a `ping` that `proto.py bigpong` answers with a 1 MiB `pad` member; from the "
            "request call to the typed result (the parent's reader, framer, envelope decode "
            "and typed decode of a 1 MiB line)",
            floor="floor.transfer_c2p",
        )
    )
    res.add(
        Figure(
            "context.transfer_c2p_codec",
            "the raw pipe's 1 MiB plus the line's encode and decode",
            "MB/s",
            s["context.transfer_c2p_codec"],
            "per round, the raw child → parent transfer's own time plus, timed in this "
            "process, `encode_response` of the `bigpong` reply (what its child does before the "
            "first byte) and the parent's depth check and one typed decode of that line (what "
            "its reader does after the last byte): what a 1 MiB JSON line moves at over a "
            "transport as fast as that round's raw pipe (tether's own, its pipe grown to 1 MiB, "
            "can be faster than the raw pipe's 64 KiB one in a round where that is slow)",
            floor="floor.transfer_c2p",
        )
    )


# --- group: agent/event flood -------------------------------------------------------------------


async def aio_flood(n: int) -> float:
    async with aio_popen(child_script("proto.py", "flood", n)) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        init = {"protocolVersion": 1, "clientInfo": {"name": "floor"}}
        run = {"runId": "floor", "prompt": "flood"}
        for i, (method, params) in enumerate((("initialize", init), ("agent/run", run)), 1):
            msg = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
            proc.stdin.write(json.dumps(msg).encode() + b"\n")
        await proc.stdin.drain()
        json.loads(await proc.stdout.readline())
        count, first, last = 0, 0, 0
        while True:
            msg = json.loads(await proc.stdout.readline())
            if msg.get("method") == "agent/event":
                count += 1
                last = time.perf_counter_ns()
                if count == 1:
                    first = last
            elif msg.get("id") == 2:
                return (count - 1) / ((last - first) / 1e9)


async def tether_flood(n: int, workspace: str) -> float:
    seen = {"count": 0, "first": 0, "last": 0}

    def on_event(ev: Event) -> None:
        if isinstance(ev, ChildEvent):
            now = time.perf_counter_ns()
            seen["count"] += 1
            if seen["count"] == 1:
                seen["first"] = now
            seen["last"] = now

    async with Supervisor() as sup:
        result = await sup.run(
            "bench",
            workspace=workspace,
            command=child_script("proto.py", "flood", n),
            on_event=on_event,
        )
    assert result.success and seen["count"] == n, (result.message, seen)
    return (seen["count"] - 1) / ((seen["last"] - seen["first"]) / 1e9)


def codec_events(lines: bytes) -> float:
    dec = Decoder()
    count = 0
    t0 = time.perf_counter_ns()
    for i in range(0, len(lines), 65536):
        for msg in dec.feed(lines[i : i + 65536]):
            assert isinstance(msg, Notification)
            decode_params(msg.method, msg.params)
            count += 1
    return count / ((time.perf_counter_ns() - t0) / 1e9)


async def flood_group(res: Results, p: Plan, workspace: str) -> None:
    s = Samples()
    lines = b"".join(
        encode_notification(
            "agent/event", AgentEventParams(run_id="r", seq=i, kind="text", data={"text": "tick"})
        )
        for i in range(p.events)
    )
    for _ in range(p.flood_runs):
        s["floor"].append(await aio_flood(p.events))
        s["tether"].append(await tether_flood(p.events, workspace))
        s["codec"].append(codec_events(lines))
    how = "(count - 1) / (time of the last - time of the first)"
    res.add(
        Figure(
            "floor.flood_asyncio",
            "agent/event flood read by a bare asyncio reader",
            "events/s",
            s["floor"],
            f"`proto.py flood` writes {p.events:,} `agent/event` lines; the parent reads them "
            f"with asyncio `readline` + stdlib `json.loads`; {how}",
        )
    )
    res.add(
        Figure(
            "tether.events",
            "`agent/event` throughput from one child",
            "events/s",
            s["tether"],
            f"`proto.py flood` writes {p.events:,} small `agent/event` notifications (encoded up "
            "front, written in 64 KiB blocks); the parent counts them in the "
            f"`Supervisor.run(on_event=...)` callback; {how}",
            floor="floor.flood_asyncio",
        )
    )
    res.add(
        Figure(
            "context.codec_events",
            "tether.protocol decode of `agent/event` lines, in-process",
            "events/s",
            s["codec"],
            "the same lines, fed in 64 KiB chunks to `Decoder.feed` + `decode_params` with no "
            "pipe and no event loop: the ceiling of the parent's reader",
            floor="tether.events",
        )
    )


# --- absolute figures: stubborn dispose, crash ----------------------------------------------------


async def stubborn_default(res: Results, p: Plan) -> None:
    """The whole dispose of a stubborn child with the default graces (`DisposePolicy()`)."""
    took, rungs = [], []
    for _ in range(max(1, p.stubborn // 2)):
        async with tethered(child_script("proto.py", "stubborn")) as child:
            await initialize(child)
            t0 = time.perf_counter_ns()
            report = await child.dispose()
            took.append((time.perf_counter_ns() - t0) / 1e9)
            rungs.append(report.rung)
    graces = DisposePolicy()
    res.add(
        Figure(
            "tether.dispose_stubborn_default",
            "dispose of a child that ignores every rung, default graces",
            "s",
            took,
            "`proto.py stubborn` (ready, then deaf to `shutdown`, EOF and SIGTERM) under "
            f"`DisposePolicy()`: shutdown {graces.shutdown:g} s, then (the EOF rung waits nothing "
            f"after an unanswered `shutdown`) term {graces.term:g} s, then SIGKILL; from the "
            "`dispose()` call to its return",
            note="rungs reached: " + ", ".join(sorted(set(rungs))),
        )
    )


def floor_crash() -> float:
    with popen(child_script("floor_crash.py")) as proc:
        w, r = _fds(proc)
        _readline(r)
        os.write(w, b"go\n")
        died = int(_readline(r).split()[1])
        proc.wait()
        return ms(time.monotonic_ns() - died)


def same_child_crash(workspace: str) -> float:
    """`proto.py crash` without tether: started by a bare `Popen`, greeted and given its run
    over blocking pipes; from its `crash-at` time to `wait()` returning (its own death: the
    kernel unmapping a Python process that imported tether's protocol and msgspec)."""
    proc = subprocess.Popen(child_script("proto.py", "crash"), stdin=PIPE, stdout=PIPE, stderr=PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        w, r = _fds(proc)
        os.write(w, encode_request(1, "initialize", _init_params()))
        _readline(r)
        run = AgentRunParams(run_id="r1", prompt="go", workspace=workspace)
        os.write(w, encode_request(2, "agent/run", run))
        died = int(proc.stderr.readline().split()[1])
        proc.wait()
        return ms(time.monotonic_ns() - died)
    finally:
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()


def proc_snapshot_ms() -> float:
    """One pass over /proc (`tree.snapshot`): what the sweep of a child that could have left its
    cgroup reads after it exits."""
    t0 = time.perf_counter_ns()
    snapshot()
    return ms(time.perf_counter_ns() - t0)


async def crash_run_fails(workspace: str, sandboxed: bool) -> float:
    """`proto.py crash` spawned and held as the crash figure's child is (its cgroup; the
    sandbox when the figure's child has one), without a `Supervisor`: from its `crash-at` time
    to its pending `agent/run` failing in the parent (ms): the child's exit as the kernel does
    it, the end of its output read, every pending request failed. What the crash figure adds
    to it is tether's judging of the tree and the result."""
    async with tethered(
        child_script("proto.py", "crash"), sandbox=workspace if sandboxed else None
    ) as child:
        await initialize(child)
        run = AgentRunParams(run_id="r1", prompt="go", workspace=workspace)
        with anyio.fail_after(10):
            try:
                await child.session.run(run)
            except ConnectionClosed:
                failed = time.monotonic_ns()
            else:
                raise AssertionError("`proto.py crash` answered its run")
        await child.dispose()
    died = next(
        int(line.split()[1])
        for line in child.stderr.tail().splitlines()
        if line.startswith("crash-at ")
    )
    return ms(failed - died)


async def _crash_result(isolation: str, workspace: str) -> tuple[float, str]:
    """One `proto.py crash` run in a fresh supervisor: (death → result in ms, failure kind)."""
    async with Supervisor(ChildConfig(isolation=isolation)) as sup:
        handle = await sup.start(
            "bench", workspace=workspace, command=child_script("proto.py", "crash")
        )
        result = await handle.result()
        t1 = time.monotonic_ns()
    assert result.failure is not None, result
    died = next(
        int(line.split()[1])
        for line in result.failure.stderr_tail.splitlines()
        if line.startswith("crash-at ")
    )
    return ms(t1 - died), result.failure.kind


async def stubborn_and_crash(res: Results, p: Plan, workspace: str) -> None:
    overshoot, rungs = [], []
    for _ in range(p.stubborn):
        async with tethered(child_script("proto.py", "stubborn"), policy=STUBBORN_POLICY) as child:
            await initialize(child)
            t0 = time.perf_counter_ns()
            report = await child.dispose()
            overshoot.append(ms(time.perf_counter_ns() - t0) - STUBBORN_GRACE * 1e3)
            rungs.append(report.rung)
    res.add(
        Figure(
            "tether.dispose_stubborn",
            "dispose of a child that ignores SIGTERM and EOF: overshoot past its grace",
            "ms",
            overshoot,
            "`proto.py stubborn` answers `initialize`, then ignores everything, stdin EOF and "
            f"SIGTERM included; its grace is shutdown {STUBBORN_POLICY.shutdown} s + term "
            f"{STUBBORN_POLICY.term} s = {STUBBORN_GRACE:.1f} s before SIGKILL (after the "
            "unanswered `shutdown` the EOF rung waits nothing); the figure is the time from the "
            "`dispose()` call to its return, minus that grace",
            note="rungs reached: " + ", ".join(sorted(set(rungs))),
        )
    )
    await stubborn_default(res, p)
    s = Samples()
    kinds: set[str] = set()
    sandbox = choose_level("auto").level
    for rnd in range(p.crashes + 1):  # round 0 warms the page cache and is dropped
        s["floor.crash_exit"].append(floor_crash())
        took, kind = await _crash_result("auto", workspace)
        s["tether.crash_result"].append(took)
        kinds.add(kind)
        s["context.crash_exit_same"].append(same_child_crash(workspace))
        s["context.crash_run_fails"].append(await crash_run_fails(workspace, sandbox == "sandbox"))
        took, kind = await _crash_result("process", workspace)
        s["context.crash_result_process"].append(took)
        kinds.add(kind)
        s["context.proc_snapshot"].append(proc_snapshot_ms())
        if rnd == 0:
            s.clear()
    res.add(
        Figure(
            "floor.crash_exit",
            "bare `python -I` child, SIGSEGV → its exit seen by the parent",
            "ms",
            s["floor.crash_exit"],
            "`floor_crash.py` writes `time.monotonic_ns()` to its stdout and SIGSEGVs itself; "
            "to `time.monotonic_ns()` just after the parent's `wait()` returns",
        )
    )
    res.add(
        Figure(
            "tether.crash_result",
            "crash (SIGSEGV) → RunResult in the parent",
            "ms",
            s["tether.crash_result"],
            "`proto.py crash` (no grandchildren) writes `time.monotonic_ns()` to stderr and "
            "SIGSEGVs itself while its `agent/run` is pending; to `time.monotonic_ns()` just "
            "after `await handle.result()` returns in the parent (CLOCK_MONOTONIC is "
            "system-wide): its exit seen, the tree judged (the sandbox seals it in its cgroup, "
            "whose emptiness is the verdict), the child reaped, the result built; a supervisor "
            f"of the defaults (isolation `{sandbox}`) each time; one sample per round, in turn "
            "with the floor's and the context rows'",
            floor="floor.crash_exit",
            note="failure kinds: " + ", ".join(sorted(kinds)),
        )
    )
    res.add(
        Figure(
            "context.crash_exit_same",
            "the same child without tether: SIGSEGV → its exit seen by a bare parent",
            "ms",
            s["context.crash_exit_same"],
            "`proto.py crash` started by `subprocess.Popen`, greeted and given its `agent/run` "
            "over blocking pipes (no trampoline, cgroup or sandbox); from its `crash-at` time to "
            "`wait()` returning: the kernel's part, what no supervisor of this child can beat",
            floor="floor.crash_exit",
        )
    )
    res.add(
        Figure(
            "context.crash_run_fails",
            "the same child as tether starts it: SIGSEGV → its pending `agent/run` fails in the "
            "parent",
            "ms",
            s["context.crash_run_fails"],
            "`proto.py crash` spawned and held as the crash figure's child is (its cgroup, "
            f"isolation `{sandbox}`), driven without a `Supervisor`: from its `crash-at` time to "
            "`ChildSession.run` raising `ConnectionClosed` (its exit as the kernel does it, the "
            "end of its output read, every pending request failed); the crash figure adds the "
            "tree's verdict, the reap and the result to it",
            floor="context.crash_exit_same",
        )
    )
    res.add(
        Figure(
            "context.crash_result_process",
            "crash → RunResult, isolation `process` (the sweep reads all of /proc)",
            "ms",
            s["context.crash_result_process"],
            "as the crash figure, with `isolation='process'`: a child that could have left its "
            "cgroup, so after its exit the sweep also scans every process's session, group and "
            "tree marker (one pass over /proc, shared by the sweeps that ask at once)",
            floor="tether.crash_result",
        )
    )
    res.add(
        Figure(
            "context.proc_snapshot",
            "one pass over /proc, in-process (the sweep of a tree that may have left its cgroup)",
            "ms",
            s["context.proc_snapshot"],
            f"`tree.snapshot()` on this host ({len(_pids())} processes now): every process's "
            "session and group, and the environment of each in a session of ours",
        )
    )


def _pids() -> list[str]:
    return [e for e in os.listdir("/proc") if e.isdigit()]


# --- memory -------------------------------------------------------------------------------------


async def memory_group(res: Results, p: Plan) -> None:
    s = Samples()
    bare = (
        ("floor", ()),
        ("context.anyio", ("anyio", "msgspec")),
        ("context.jsonrpc", ("anyio", "msgspec", "jsonrpcserver")),
        ("context.asyncio", REQUIRED_LIBRARIES),
    )
    for _ in range(p.rss):
        for key, mods in bare:
            with popen(child_script("floor_bare.py", *mods)) as proc:
                _readline(_fds(proc)[1])
                await anyio.sleep(0.2)
                rss, uss = _memory(proc.pid)
            s[f"{key}.rss"].append(rss)
            s[f"{key}.uss"].append(uss)
        async with tethered(TETHER_CHILD) as child:
            await initialize(child)
            await anyio.sleep(0.2)
            rss, uss = _memory(child.pid)
        s["tether.rss"].append(rss)
        s["tether.uss"].append(uss)
        zygote = await Zygote.start(build_child_env(os.environ))
        try:
            async with tethered(TETHER_CHILD, zygote=zygote) as child:
                await initialize(child)
                await anyio.sleep(0.2)
                rss, uss = _memory(child.pid)
            s["tether.zygote_rss"].append(rss)
            s["tether.zygote_uss"].append(uss)
            s["context.zygote_uss"].append(_memory(zygote.pid)[1])
        finally:
            await zygote.aclose()
    what = "psutil `memory_full_info()` of the idle child, 0.2 s after its first line"
    for key, title in (
        ("floor", "bare `python -I` child"),
        ("context.anyio", "`python -I` child importing anyio + msgspec"),
        ("context.jsonrpc", "`python -I` child importing anyio + msgspec + jsonrpcserver"),
        (
            "context.asyncio",
            "`python -I` child importing anyio + msgspec + asyncio + anyio's asyncio backend",
        ),
    ):
        for m in ("rss", "uss"):
            floor = None if key == "floor" else f"floor.{m}_bare"
            fkey = f"floor.{m}_bare" if key == "floor" else f"{key}.{m}"
            res.add(Figure(fkey, f"{title}: {m.upper()}", "MiB", s[f"{key}.{m}"], what, floor))
    what = "psutil `memory_full_info()` of an initialized, idle tether child, 0.2 s after it"
    res.add(
        Figure(
            "tether.rss", "idle tether child: RSS", "MiB", s["tether.rss"], what, "floor.rss_bare"
        )
    )
    res.add(
        Figure(
            "tether.uss", "idle tether child: USS", "MiB", s["tether.uss"], what, "floor.uss_bare"
        )
    )
    what = (
        'as the idle tether child, forked by a zygote (`spawner="zygote"`): pages it still '
        "shares copy-on-write with the zygote count in RSS, not in USS"
    )
    for m in ("rss", "uss"):
        res.add(
            Figure(
                f"tether.zygote_{m}",
                f"idle zygote-forked child: {m.upper()}",
                "MiB",
                s[f"tether.zygote_{m}"],
                what,
                f"tether.{m}",
            )
        )
    res.add(
        Figure(
            "context.zygote_uss",
            "the zygote itself: USS",
            "MiB",
            s["context.zygote_uss"],
            "psutil `memory_full_info()` of the zygote (one per supervisor), with one child "
            "forked; paid once, shared by every child it forks",
        )
    )


# --- many live children through the zygote -------------------------------------------------------


def _fleet(n: int, rounds: int, spawn_seconds: float) -> dict[str, Any]:
    """`benchmarks/fleet.py` in a process of its own, bounded: it cannot hang the bench."""
    argv = ["--children", str(n), "--rounds", str(rounds), "--spawn-seconds", str(spawn_seconds)]
    out = subprocess.run(
        [PY, "-m", "benchmarks.fleet", *argv],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=spawn_seconds + 240,
    )
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def fleet_group(res: Results, p: Plan) -> None:
    n = p.fleet
    runs = [_fleet(n, 4, 60.0) for _ in range(p.fleet_runs)]
    for r in runs:
        if r["reached"] != n or r["survivors"]:
            raise RuntimeError(f"fleet of {n}: {r['reached']} ready, survivors {r['survivors']}")
    how = (
        f"`benchmarks/fleet.py --children {n}` in a process of its own: one zygote, {n} "
        "tether children forked from it one after another, each held as `Supervisor` holds a "
        "child (`spawn_child`, its own cgroup on a cgroup tier, its context)"
    )
    res.add(
        Figure(
            "tether.fleet_ready",
            f"{n} live children through the zygote: all ready",
            "s",
            [r["ready_s"] for r in runs],
            f"{how}; from just before the first spawn to the last `initialize` answered (every "
            "`initialize` is sent once all are forked)",
        )
    )
    res.add(
        Figure(
            "context.fleet_ping_one",
            "`ping` to one live child alone, p99",
            "ms",
            [_p99(r["ping_one_us"]) / 1e3 for r in runs],
            f"the 99th percentile of {4 * n} `ping` round trips to one zygote child, alone, "
            "measured just before the fleet is spawned (under the same load)",
        )
    )
    res.add(
        Figure(
            "tether.fleet_ping_p99",
            f"`ping` across {n} live children, p99",
            "ms",
            [_p99(r["ping_us"]) / 1e3 for r in runs],
            f"the 99th percentile of the round trips of 4 rounds, each pinging every one of the "
            f"{n} children once, one at a time, all of them alive",
            floor="context.fleet_ping_one",
        )
    )
    res.add(
        Figure(
            "tether.fleet_uss",
            f"{n} live children: USS per child",
            "MiB",
            [sum(r["uss_mib"]) / len(r["uss_mib"]) for r in runs],
            "the sum of every idle child's USS (psutil `memory_full_info()`) over the number "
            "of children, after the pings",
        )
    )
    res.add(
        Figure(
            "tether.fleet_dispose",
            f"{n} live children: dispose all",
            "s",
            [r["dispose_s"] for r in runs],
            "every child's `dispose()` started at once; to the last one returning (the "
            "shutdown rung, exit, sweep, reap)",
            note="survivors: "
            + ", ".join(str(len(r["survivors"])) for r in runs)
            + "; rungs: "
            + ", ".join(sorted({g for r in runs for g in r["rungs"]})),
        )
    )
    if p.fleet_stretch:
        # The stretch line: whatever it reaches, bounded by time and by free memory; a
        # stretch that fails is said, and the rest of the bench goes on.
        try:
            r = _fleet(p.fleet_stretch, 1, 30.0)
        except (subprocess.SubprocessError, ValueError, KeyError) as exc:
            print(f"  stretch: {p.fleet_stretch} live children: failed ({exc})", flush=True)
            return
        ping = f", ping p99 {_p99(r['ping_us']) / 1e3:.1f} ms" if r["ping_us"] else ""
        uss = sum(r["uss_mib"]) / max(1, len(r["uss_mib"]))
        res.add(
            Figure(
                "context.fleet_stretch_ready",
                f"stretch: {p.fleet_stretch} live children asked, all ready",
                "s",
                [r["ready_s"]],
                f"as the {n}-children fleet with {p.fleet_stretch} asked, one ping round, "
                "spawning stopped after 30 s or under 2 GiB of free memory",
                note=f"{r['reached']} of {p.fleet_stretch} ready{ping}, USS {uss:.2f} MiB per "
                f"child, dispose {r.get('dispose_s', 0.0):.2f} s, "
                f"{len(r['survivors'])} survivors" + (f"; {r['stopped']}" if r["stopped"] else ""),
            )
        )


# --- many children at once ----------------------------------------------------------------------


def broker_group(res: Results, p: Plan) -> None:
    """`benchmarks/broker_load.py` in a process of its own: the broker under load."""
    n, phases, seconds = p.broker_children, p.broker_phases, p.broker_seconds
    argv = ["--children", str(n), "--phases", str(phases), "--seconds", str(seconds)]
    argv += ["--pings", str(p.broker_pings)]
    out = subprocess.run(
        [PY, "-m", "benchmarks.broker_load", *argv],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=300 + phases * seconds,
    )
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    ping = [[us / 1000 for us in phase] for phase in got["ping_us"]]
    turn = [[us / 1000 for us in phase] for phase in got["turn_us"]]
    median = [statistics.median(x) for x in ping], [statistics.median(x) for x in turn]
    res.add(
        Figure(
            "context.load_ping_p50",
            f"`ping` across {n} live children, all at once: p50",
            "ms",
            median[0],
            f"the children of the broker figure, idle at a gate, each pinged "
            f"{p.broker_pings} times by a task of its own, all at once ({n} requests in flight, "
            "as in the load); the median of each phase's round trips (one sample per phase)",
        )
    )
    res.add(
        Figure(
            "context.load_ping_p99",
            f"`ping` across {n} live children, all at once: p99",
            "ms",
            [_p99(x) for x in ping],
            "as the p50: each phase's 99th percentile",
        )
    )
    res.add(
        Figure(
            "tether.broker_p50",
            f"model turn round trip, {n} children asking at once: p50",
            "ms",
            median[1],
            f"`benchmarks/broker_load.py`: {n} runs of `benchmarks/children/loop_agent.py` in one "
            "`Supervisor` (the defaults: the zygote, the sandbox), each asking the parent for "
            f"model turns one after another for {seconds:g} s per phase ({phases} phases), a "
            "model that answers at once; each turn timed by its child around "
            "`AgentContext.complete_model` (the request, the parent's reader, the broker's "
            "admission and count, the model, the answer): all of it the parent's and the "
            "wire's but the child's own runtime; the median of each phase's turns (one sample "
            "per phase)",
            floor="context.load_ping_p50",
        )
    )
    res.add(
        Figure(
            "tether.broker_p99",
            f"model turn round trip, {n} children asking at once: p99",
            "ms",
            [_p99(x) for x in turn],
            "as the p50: each phase's 99th percentile",
            floor="context.load_ping_p99",
        )
    )
    res.add(
        Figure(
            "tether.broker_turns",
            f"model turns served per second, {n} children asking at once",
            "turns/s",
            got["turns_per_s"],
            "per phase: the turns the parent's model served, over the time from the first to "
            f"the last of them ({', '.join(str(t) for t in got['turns'])} turns)",
        )
    )


def floor_swarm(n: int) -> float:
    t0 = time.perf_counter_ns()
    with contextlib.ExitStack() as stack:
        procs = [stack.enter_context(popen(child_script("floor_bare.py"))) for _ in range(n)]
        for proc in procs:
            _readline(_fds(proc)[1])
    return (time.perf_counter_ns() - t0) / 1e9


def tether_swarm(n: int) -> dict[str, Any]:
    out = subprocess.run(
        [PY, "-m", "benchmarks.swarm", "--children", str(n)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if got["ok"] != n:
        raise RuntimeError(f"only {got['ok']} of {n} swarm runs succeeded: {got['failures']}")
    return got


def swarm_group(res: Results, p: Plan) -> None:
    n = p.swarm_children
    floor, runs = [], []
    for _ in range(p.swarm_runs):
        floor.append(floor_swarm(n))
        runs.append(tether_swarm(n))
    res.add(
        Figure(
            "floor.swarm",
            f"{n} bare `python -I` children at once",
            "s",
            floor,
            f"spawn {n} `floor_bare.py` children, read each one's first line, close their "
            "stdins, wait for all; from the first Popen to the last wait()",
        )
    )
    res.add(
        Figure(
            "tether.swarm",
            f"{n} children spawned, run and disposed concurrently",
            "s",
            [r["seconds"] for r in runs],
            f"in a fresh process (`benchmarks/swarm.py`): {n} `Supervisor.start` calls (the "
            "real tether child, a one-turn scripted `complete`), from before the first start to "
            "leaving `async with Supervisor()` with every result in",
            floor="floor.swarm",
        )
    )
    res.add(
        Figure(
            "tether.swarm_rss",
            f"{n} children at once: peak parent RSS",
            "MiB",
            [r["rss_peak_kib"] / 1024 for r in runs],
            "VmHWM (peak RSS) of the swarm process at the end",
            floor="context.swarm_rss_before",
        )
    )
    res.add(
        Figure(
            "context.swarm_rss_before",
            "swarm process RSS before its first spawn",
            "MiB",
            [r["rss_before_kib"] / 1024 for r in runs],
            "VmRSS of the swarm process after its imports, before the first `start()`",
        )
    )


# --- scale-out through Ray (optional) ----------------------------------------------------------


def ray_group(res: Results, p: Plan) -> None:
    """A brokered run through Ray beside a local one, and many children over two nodes
    (`benchmarks/ray_scale.py`, in a process of its own with its own loopback cluster).
    Skipped, with a line saying so, when the ray extra is not installed."""
    if importlib.util.find_spec("ray") is None:
        print("   skipped: Ray is not installed (pip install 'tether[ray]')", flush=True)
        return
    n = p.ray_children
    out = subprocess.run(
        [PY, "-m", "benchmarks.ray_scale", "--children", str(n), "--runs", str(p.ray_runs)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    local, remote = got["swarm"]["local"], got["swarm"]["ray"]
    one_run = (
        "one `await sup.run()` with the real tether child and a one-turn scripted model whose "
        "turn the driver brokers: spawn, handshake, `model/complete`, result, dispose"
    )
    res.add(
        Figure(
            "context.ray_local_run",
            "one brokered run, local",
            "ms",
            got["run_ms"]["local"],
            f"{one_run}; a local `Supervisor`",
        )
    )
    res.add(
        Figure(
            "tether.ray_run",
            "one brokered run on another Ray node",
            "ms",
            got["run_ms"]["ray"],
            f"{one_run}; `RayPlacement` on the second node of a loopback cluster, the "
            "model answered in the driver (the request on the run's stream, the answer to its "
            "host), interleaved with the local run",
            floor="context.ray_local_run",
        )
    )
    res.add(
        Figure(
            "context.ray_local_swarm",
            f"{n} children at once, local",
            "s",
            [local["seconds"]],
            "first `start()` to last result, one `Supervisor`",
        )
    )
    res.add(
        Figure(
            "tether.ray_swarm",
            f"{n} children at once over 2 Ray nodes",
            "s",
            [remote["seconds"]],
            f"first `start()` to last result, `RayPlacement` over both nodes "
            f"(per_node={max(1, -(-n // 2))}), the placement already open",
            floor="context.ray_local_swarm",
        )
    )
    res.add(
        Figure(
            "context.ray_local_swarm_memory",
            f"{n} children at once, local: memory",
            "MiB",
            [local["pss_peak_mib"] - local["pss_before_mib"]],
            "peak summed PSS of this process and the processes the swarm started (the "
            "zygote, the children; sampled every 0.2 s) during the swarm, minus the same sum "
            "just before, taken once the tree had settled",
        )
    )
    res.add(
        Figure(
            "tether.ray_swarm_memory",
            f"{n} children over 2 Ray nodes: memory",
            "MiB",
            [remote["pss_peak_mib"] - remote["pss_before_mib"]],
            "peak summed PSS of the driver and every process of the cluster (host "
            "actors, children; sampled every 0.2 s) during the swarm, minus the same sum just "
            "before, taken once the tree had settled; includes opening and closing the "
            "placement",
            floor="context.ray_local_swarm_memory",
        )
    )
    res.add(
        Figure(
            "context.ray_placement_open",
            "opening a placement on 2 nodes",
            "s",
            [remote["open_s"]],
            "`async with RayPlacement()` entered: two host actors started, each host's "
            "supervisor serving",
        )
    )
    res.add(
        Figure(
            "context.ray_cluster_idle",
            "idle two-node cluster (with the driver)",
            "MiB",
            [got["cluster_idle_pss_mib"]],
            "summed PSS of the driver and the cluster's processes, no placement open",
        )
    )


# --- group: continuable agents -----------------------------------------------------------------


class CompletingModel:
    """A model provider that answers every turn at once by calling `complete`."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.calls += 1
        call = ToolCall(id=f"b{self.calls}", name="complete", arguments={"summary": "ok"})
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="done", tool_calls=[call]),
            usage=Usage(input_tokens=10, output_tokens=5),
        )


class StampingModel(CompletingModel):
    """`CompletingModel` that notes when it answered its first turn after `mark()`."""

    def __init__(self) -> None:
        super().__init__()
        self.first: int | None = None

    def mark(self) -> None:
        self.first = None

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        answer = await super().complete(params)
        if self.first is None:
            self.first = time.perf_counter_ns()
        return answer


HIBERNATE_AFTER = 0.05
"""The keep-alive of the agent the wake-up figures wake: its child goes 50 ms after an answer."""


async def _hibernated(sup: Supervisor, agent_id: str) -> None:
    """Wait until the agent's child has gone by its keep-alive and its lease is released."""
    handle = sup.agents.live_handle(agent_id)
    if handle is not None:
        await handle.wait()  # the keep-alive passed: the child went down the ladder
    with anyio.fail_after(60):
        # The release is the agents' tending task's, right after the child went; the store is
        # where it shows.
        while (got := await sup.agents.show(agent_id, tail=0)) and got.summary.holder:  # noqa: ASYNC110
            await anyio.sleep(0.005)


LONG_TRANSCRIPT = 1000
"""Messages in the transcript the long cold resume replays."""


async def _pad_transcript(sup: Supervisor, agent_id: str, messages: int) -> int:
    """Grow an idle agent's stored transcript to `messages` (user/assistant pairs of ~1 KB)."""
    from tether.parent.agents.sessions import Activation

    await sup.agents.dispose(agent_id)
    store = await sup.agents.store()
    activation = await store.acquire(agent_id)
    assert isinstance(activation, Activation)
    pad = "x" * 1000
    turns = [
        m
        for i in range(messages // 2)
        for m in (
            ChatMessage(role="user", content=f"question {i} {pad}"),
            ChatMessage(role="assistant", content=f"answer {i} {pad}"),
        )
    ]
    await activation.append(turns)
    await activation.release("idle")
    detail = await store.get(agent_id)
    assert detail is not None
    return detail.transcript_bytes


async def continue_group(res: Results, p: Plan, workspace: str) -> None:
    """A follow-up to a live child beside `ping`; a cold resume beside a fresh spawn."""
    from tether.parent.run.spec import Continuation

    s = Samples()
    per = max(1, p.follow_ups // p.rounds)
    model = CompletingModel()
    rounds = max(p.rounds, p.resumes)
    with tempfile.TemporaryDirectory(prefix="tether-bench-state-") as state:
        async with Supervisor(state_dir=state) as sup, tethered(TETHER_CHILD) as pinger:
            await initialize(pinger)
            short = await sup.spawn_agent("bench", workspace=workspace, model=model)
            long = await sup.spawn_agent("bench", workspace=workspace, model=model)
            await short.result()
            await long.result()
            long_bytes = await _pad_transcript(sup, long.id, LONG_TRANSCRIPT)
            stamping = StampingModel()
            sleepy = await sup.spawn_agent(
                "bench", workspace=workspace, model=stamping, keep_alive=HIBERNATE_AFTER
            )
            await sleepy.result()
            for rnd in range(rounds + 1):  # round 0 warms everything up and is dropped
                n = per if rnd <= p.rounds else 0
                s["context.continue_ping"] += [us(x) for x in await tether_pings(pinger, n)]
                warm = await sup.spawn_agent("bench", workspace=workspace, model=model)
                await warm.result()
                for _ in range(n):
                    t0 = time.perf_counter_ns()
                    got = await sup.send_message(warm.id, "more")
                    s["tether.follow_up"].append(us(time.perf_counter_ns() - t0))
                    assert got.success, got.message
                await sup.agents.dispose(warm.id)
                plain = await sup.start(
                    "bench", workspace=workspace, model=model, continuation=Continuation(3600)
                )
                await plain.result()
                for _ in range(n):
                    t0 = time.perf_counter_ns()
                    answer = await plain.message("more")
                    s["context.follow_up_unstored"].append(us(time.perf_counter_ns() - t0))
                    assert answer is not None and answer.success
                plain.close()
                await plain.wait()
                if rnd <= p.resumes:
                    t0 = time.perf_counter_ns()
                    fresh = await sup.run("bench", workspace=workspace, model=model)
                    s["context.fresh_run"].append(ms(time.perf_counter_ns() - t0))
                    assert fresh.success, fresh.message
                    t0 = time.perf_counter_ns()
                    spawned = await sup.spawn_agent("bench", workspace=workspace, model=model)
                    first = await spawned.result()
                    s["tether.agent_spawn"].append(ms(time.perf_counter_ns() - t0))
                    assert first.success, first.message
                    await sup.agents.dispose(spawned.id)
                    for key, agent in (
                        ("tether.cold_resume", short),
                        ("tether.cold_resume_long", long),
                    ):
                        await sup.agents.dispose(agent.id)
                        t0 = time.perf_counter_ns()
                        got = await sup.send_message(agent.id, "again")
                        s[key].append(ms(time.perf_counter_ns() - t0))
                        assert got.success, got.message
                    # Wake: hibernated by its keep-alive, woken by a message (a cold resume).
                    await _hibernated(sup, sleepy.id)
                    stamping.mark()
                    t0 = time.perf_counter_ns()
                    got = await sup.send_message(sleepy.id, "wake up")
                    done = time.perf_counter_ns()
                    assert got.success and stamping.first is not None, got.message
                    s["tether.wake_first_turn"].append(ms(stamping.first - t0))
                    s["context.wake"].append(ms(done - t0))
                    # And after a restart: a new supervisor on the same state directory finds
                    # the agent and wakes it.
                    await _hibernated(sup, sleepy.id)
                    stamping.mark()
                    t0 = time.perf_counter_ns()
                    async with Supervisor(state_dir=state) as restarted:
                        found = await restarted.list_agents()
                        assert sleepy.id in {a.id for a in found}
                        got = await restarted.send_message(sleepy.id, "again", model=stamping)
                        assert got.success and stamping.first is not None, got.message
                        s["tether.wake_after_restart"].append(ms(stamping.first - t0))
                if rnd == 0:
                    s.clear()
    res.add(
        Figure(
            "context.continue_ping",
            "`ping` round trip (measured beside the follow-ups)",
            "µs",
            s["context.continue_ping"],
            "as `tether.ping`, on a live tether child, interleaved with the figures of this group",
            floor="floor.pingpong_asyncio",
        )
    )
    res.add(
        Figure(
            "tether.follow_up",
            "follow-up message to a live child (`send_message`, warm)",
            "µs",
            s["tether.follow_up"],
            "`Supervisor.send_message` to a continuable agent whose child idles after its "
            "last answer, with a model that calls `complete` at once: from the call to its "
            "return. The user message stored, `agent/message`, one brokered model turn stored "
            "before the child gets it, the `complete` tool, the RunResult, the activation's end "
            "stored (three WAL commits, each fsynced: `synchronous=FULL`); a fresh agent each "
            f"round, {per} follow-ups each",
            floor="context.continue_ping",
        )
    )
    res.add(
        Figure(
            "context.follow_up_unstored",
            "follow-up to a live child without a session (`RunHandle.message`)",
            "µs",
            s["context.follow_up_unstored"],
            "as the follow-up, on a continuable run started with `Supervisor.start(continuation="
            "...)` and no session store: what the follow-up costs without its durable writes",
            floor="context.continue_ping",
        )
    )
    res.add(
        Figure(
            "context.fresh_run",
            "fresh spawn, one-turn run (`Supervisor.run`)",
            "ms",
            s["context.fresh_run"],
            "as `context.run_one`, measured beside the cold resumes (same model)",
            floor="tether.spawn_ready",
        )
    )
    res.add(
        Figure(
            "tether.agent_spawn",
            "new continuable agent, first answer (`spawn_agent` + `result()`)",
            "ms",
            s["tether.agent_spawn"],
            "a fresh spawn as in the one-turn run, plus the session created, its lease taken, "
            "the prompt, the turn and the answer stored; from the `spawn_agent` call to "
            "`result()` returning (the child then idles; its dispose is not timed)",
            floor="context.fresh_run",
        )
    )
    res.add(
        Figure(
            "tether.cold_resume",
            "cold resume, short transcript (`send_message`, no live child)",
            "ms",
            s["tether.cold_resume"],
            "`send_message` to an agent whose child was disposed (its lease released): the "
            "lease taken again, the transcript read (a few messages), the message stored, a "
            "fresh child spawned with the transcript as its history, one turn, the answer "
            "stored; from the call to its return",
            floor="context.fresh_run",
        )
    )
    res.add(
        Figure(
            "tether.wake_first_turn",
            "wake a hibernated agent: cold resume → first answered turn",
            "ms",
            s["tether.wake_first_turn"],
            f"an agent whose child went {HIBERNATE_AFTER * 1000:.0f} ms after its last answer "
            "(its keep-alive; the lease released) gets `send_message`: the lease taken, the "
            "transcript read, the message stored, a fresh child spawned with the transcript "
            "as its history, its first model turn answered; from the call to that answer",
            floor="context.fresh_run",
        )
    )
    res.add(
        Figure(
            "context.wake",
            "wake a hibernated agent, to its result",
            "ms",
            s["context.wake"],
            "as the wake-up, from the call to `send_message` returning (the turn stored, the "
            "`complete` tool, the answer stored)",
            floor="tether.wake_first_turn",
        )
    )
    res.add(
        Figure(
            "tether.wake_after_restart",
            "a restarted supervisor wakes a hibernated agent: start → first answered turn",
            "ms",
            s["tether.wake_after_restart"],
            "a new `Supervisor` on the same state directory (its keeper started, the store "
            "opened), `list_agents`, then the wake-up as above; from entering the supervisor "
            "to the woken child's first answered turn",
            floor="tether.wake_first_turn",
        )
    )
    res.add(
        Figure(
            "tether.cold_resume_long",
            f"cold resume, {LONG_TRANSCRIPT}-message transcript (about {long_bytes // 1024} KiB)",
            "ms",
            s["tether.cold_resume_long"],
            "as the short cold resume, with a stored transcript of "
            f"{LONG_TRANSCRIPT} messages of about 1 KB each: read from the store, sent in "
            "`agent/run` as `history`, and sent back in the child's model turn",
            floor="tether.cold_resume",
        )
    )


# --- main ---------------------------------------------------------------------------------------


async def measure(res: Results, p: Plan) -> None:
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as ws:
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("spawn, ready, exit, dispose", lambda: spawn_group(res, p, ws)),
            ("round trips", lambda: ping_group(res, p, ws)),
            ("1 MiB messages", lambda: transfer_group(res, p)),
            ("agent/event flood", lambda: flood_group(res, p, ws)),
            ("stubborn dispose, crash", lambda: stubborn_and_crash(res, p, ws)),
            ("idle memory", lambda: memory_group(res, p)),
            ("warm pool", lambda: pool_group(res, p, ws)),
            ("continuable agents", lambda: continue_group(res, p, ws)),
            (
                "follow-up round trip",
                lambda: follow_up_group(res, p.rounds, max(1, p.follow_ups // p.rounds), ws),
            ),
            ("fan-out", lambda: fanout_group(res, p.fanouts, ws, p.fanout)),
            ("providers", lambda: providers_group(res, p.whole_runs, ws)),
            ("first run", lambda: first_run_group(res, p.first_runs)),
            ("egress proxy", lambda: egress_group(res, p.egress_rounds, p.egress_requests)),
            ("model gateway", lambda: gateway_group(res, p.gateway_rounds, p.gateway_calls)),
            (
                "layered workspaces",
                lambda: layered_group(res, p.whole_runs, ws, p.layer_files),
            ),
            ("traces", lambda: traces_group(res, p.traced_runs)),
        ]
        for name, step in steps:
            if p.only and name not in p.only:
                continue
            print(f"== {name}", flush=True)
            await step()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tether's benchmarks; writes docs/performance.md")
    ap.add_argument("--quick", action="store_true", help="tiny sample counts (smoke test)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    ap.add_argument("--json", type=Path, help="also write the figures and their samples here")
    ap.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="measure nothing: write the report again from a run's `--json` (with the notes "
        "as they are now)",
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GROUP",
        help="run only this group (repeatable; e.g. providers); the report then holds only its "
        "figures and the targets it can check",
    )
    args = ap.parse_args(argv)
    if args.render is not None:
        saved = msgspec.json.decode(args.render.read_bytes(), type=Saved)
        res = Results(quick=saved.quick, figures={f.key: f for f in saved.figures})
        text = render(res, saved.started, saved.seconds, saved.load)
        _write(args.out, text)
        print(f"wrote {args.out} from {args.render}")
        return 0
    plan = dataclasses.replace(Plan.make(args.quick), only=tuple(args.only))
    res = Results(quick=plan.quick)
    started = dt.datetime.now(dt.UTC)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    anyio.run(measure, res, plan, backend="asyncio")
    if not plan.only or "live children through the zygote" in plan.only:
        print("== live children through the zygote", flush=True)
        fleet_group(res, plan)
    if not plan.only or "the broker under load" in plan.only:
        print("== the broker under load", flush=True)
        broker_group(res, plan)
    if not plan.only or "many children at once" in plan.only:
        print("== many children at once", flush=True)
        swarm_group(res, plan)
    if not plan.only or "scale-out through Ray" in plan.only:
        print("== scale-out through Ray", flush=True)
        ray_group(res, plan)
    seconds = time.perf_counter() - t0
    load = (load0, os.getloadavg()[0])
    _write(args.out, render(res, started, seconds, load))
    if args.json:
        saved = Saved(res.quick, started, seconds, load, list(res.figures.values()))
        args.json.write_bytes(msgspec.json.encode(saved))
    print(f"wrote {args.out} in {seconds:.0f} s")
    return 0


@dataclass
class Saved:
    """A run's figures as `--json` writes them and `--render` reads them."""

    quick: bool
    started: dt.datetime
    seconds: float
    load: tuple[float, float]
    figures: list[Figure]


def _write(out: Path, text: str) -> None:
    # The soak's section is written by scripts/soak, not measured here: keep it.
    kept = section(out.read_text(), SOAK_HEADING) if out.exists() else None
    if kept is not None:
        text = with_section(text, SOAK_HEADING, kept)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
