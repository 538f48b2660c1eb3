"""tether's soak: many spawn → run → dispose cycles per spawner, checked for leaks as they go,
and a round of concurrent faulty runs checked for the right failure kind each.

`scripts/soak` runs `python -m benchmarks.soak`. For each spawner — `exec` (a fresh
interpreter through the trampoline), `zygote` (forked from the pre-imported runtime), `pool`
(a warm pool hands out initialized children) — it runs N cycles, one at a time, each a real
run of tether's child on a scripted model (list the workspace, complete), on the containment
tier `auto` picks. Every `--every` cycles it checks, with every run over (a pool full again):

- processes: nothing alive in this process's tree or carrying one of its tree markers but the
  supervisor's own helpers (the keeper, the zygote, the pool's ready children);
- descriptors: this process's open fds, against the first checkpoint;
- cgroups: directories named for this process (`tether-<pid>-...`) beyond the pool's ready
  children's and the one the zygote's standby waits in;
- memory: this process's RSS, whose growth from the first checkpoint to the last is reported.

Then the mixed round: `--mixed` runs at once, a quarter each of a child that crashes
(SIGSEGV), one that hangs past a 1 s wall limit, one that writes a line past the message cap,
and a successful run; every result must have its own kind, and the leak checks run again.

Then the crash round (`benchmarks/crash.py`): `--crash` SIGKILLs (200 by default) of a
supervisor whose continuable agents keep receiving follow-ups, at random points of a seeded
schedule, against one state directory, each checked for what the store and the host must hold
after a crash (integrity, every acknowledged follow-up stored with its answer, nothing of the
killed tree alive 2 s later, every agent resumed), with the takeover time reported.

The exit status is 1 when any check found a leak, a cycle failed, a mixed run came back with
the wrong kind, or the crash round found a violation. `--write` puts the figures in
docs/performance.md's "Soak" section (which `scripts/bench` keeps when it regenerates the
rest); `--json` writes them as JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio
import psutil

from benchmarks import crash
from benchmarks.report import SOAK_HEADING, machine, with_section
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.config import ChildConfig, PoolSpec
from tether.parent.process.host import host
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.process.markers import TREE_ENV, marker_prefix
from tether.parent.process.zygote import standby_pids
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import RunResult

ROOT = Path(__file__).resolve().parents[1]
PERFORMANCE = ROOT / "docs" / "performance.md"
SPAWNERS = ("exec", "zygote", "pool")
POOL_SIZE = 2
SCRIPT = """{"turns": [
  {"text": "Looking.", "toolCalls": [{"name": "list_dir", "arguments": {"path": "."}}]},
  {"text": "Done.", "toolCalls": [{"name": "complete",
    "arguments": {"summary": "soaked", "paths": ["notes.txt"]}}]}
]}"""
MIB = 1 << 20
OVERSIZE_CAP = 1 * MIB
"""The message cap of the mixed round's children: the oversize child writes past it."""


@dataclass
class Checkpoint:
    cycles: int
    seconds: float
    rss_mib: float
    fds: int
    leaked_processes: list[int] = field(default_factory=list)
    leaked_cgroups: list[str] = field(default_factory=list)
    live_children: int = 0
    """Children the supervisor still has registered (the pool's ready ones)."""


@dataclass
class SpawnerSoak:
    spawner: str
    cycles: int
    seconds: float = 0.0
    failed: list[str] = field(default_factory=list)
    """Cycles whose run did not succeed: why."""
    pooled: int = 0
    """Runs that took a ready child from the pool."""
    checkpoints: list[Checkpoint] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0

    @property
    def rss_growth_mib(self) -> float:
        cps = self.checkpoints
        return cps[-1].rss_mib - cps[0].rss_mib if len(cps) > 1 else 0.0

    @property
    def fd_growth(self) -> int:
        cps = self.checkpoints
        return max(cp.fds for cp in cps) - cps[0].fds if cps else 0

    @property
    def leaked_processes(self) -> int:
        return max((len(cp.leaked_processes) for cp in self.checkpoints), default=0)

    @property
    def leaked_cgroups(self) -> int:
        return max((len(cp.leaked_cgroups) for cp in self.checkpoints), default=0)

    @property
    def clean(self) -> bool:
        return not (self.failed or self.leaked_processes or self.leaked_cgroups or self.fd_growth)


@dataclass
class MixedRound:
    runs: int
    seconds: float = 0.0
    wrong: list[str] = field(default_factory=list)
    """`wanted → got: message` for every run with the wrong kind."""
    kinds: dict[str, int] = field(default_factory=dict)
    after: Checkpoint | None = None
    fds_before: int = 0

    @property
    def clean(self) -> bool:
        a = self.after
        leaks = a is not None and (
            a.leaked_processes or a.leaked_cgroups or a.fds > self.fds_before
        )
        return not self.wrong and not leaks


# --- what is left -------------------------------------------------------------------------------


def _marked(prefix: str) -> set[int]:
    needle = f"{TREE_ENV}={prefix}".encode()
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read():
                    found.add(int(entry.name))
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def leaked_processes(sup: Supervisor) -> list[int]:
    """Live processes of this process's tree (by parentage or tree marker) that are not the
    supervisor's own helpers. The helpers are looked up after the tree: the zygote forks its
    next standby on its own, whenever it has been idle for a moment, and one forked between
    the two looks would otherwise count as left behind."""
    me = psutil.Process()
    pids = {p.pid for p in me.children(recursive=True)} | _marked(marker_prefix())
    pids.discard(me.pid)
    helpers = set()
    if sup._keeper is not None:
        helpers.add(sup._keeper.pid)
    if sup.zygote_pid is not None:
        helpers.add(sup.zygote_pid)
        helpers.update(standby_pids(sup.zygote_pid))  # the zygote's child parked ahead
    if sup.pool is not None:
        helpers.update(sup.pool.ready_pids)
    return sorted(pid for pid in pids - helpers if _alive(pid))


def our_cgroups() -> list[Path]:
    mine = f"tether-{os.getpid()}-"
    return sorted(
        d
        for parent in host().parents.values()
        if parent.is_dir()
        for d in parent.iterdir()
        if d.name.startswith(mine) and d.is_dir()
    )


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


async def checkpoint(sup: Supervisor, cycles: int, started: float) -> Checkpoint:
    # A run's result goes out once its tree is judged, before its pipes, cgroup and sandbox
    # directories are let go: what is left is counted once every run has let go (bounded).
    with anyio.fail_after(30):
        for handle in list(sup._handles):
            await handle.wait()
    if sup.pool is not None:
        with anyio.fail_after(60):
            await sup.pool.wait_ready(sup.pool.size)
    ready = len(sup.pool.ready_pids) if sup.pool is not None else 0
    expected_cgroups = ready * len(host().parents)
    # The cgroup the zygote's standby waits in lives as long as the zygote, as the standby does.
    helpers = set(sup._zygote.standby_cgroups) if sup._zygote is not None else set()
    cgroups = [d for d in our_cgroups() if d not in helpers]
    return Checkpoint(
        cycles=cycles,
        seconds=round(time.monotonic() - started, 3),
        rss_mib=round(psutil.Process().memory_info().rss / MIB, 2),
        fds=fd_count(),
        leaked_processes=leaked_processes(sup),
        leaked_cgroups=[str(d) for d in cgroups][expected_cgroups:]
        if len(cgroups) > expected_cgroups
        else [],
        live_children=len(sup._live),
    )


# --- the cycles -----------------------------------------------------------------------------------


async def soak(spawner: str, cycles: int, every: int, workspace: Path) -> SpawnerSoak:
    out = SpawnerSoak(spawner, cycles)
    config = ChildConfig(spawner="zygote" if spawner == "zygote" else "exec")
    pool = PoolSpec(POOL_SIZE, workspace=workspace) if spawner == "pool" else None
    model = ScriptedModel.from_json(SCRIPT)
    async with Supervisor(config, pool=pool) as sup:
        started = time.monotonic()
        for i in range(1, cycles + 1):
            if sup.pool is not None:
                with anyio.fail_after(60):
                    await sup.pool.wait_ready(1)
                before = sup.pool.handed_out
            result = await sup.run(
                "soak",
                agent="explorer",
                workspace=workspace,
                model=model,
                limits=Limits(wall="60s"),
            )
            if sup.pool is not None and sup.pool.handed_out > before:
                out.pooled += 1
            if not result.success:
                kind = result.failure.kind if result.failure else result.status
                out.failed.append(f"cycle {i}: {kind}: {result.message}")
            if i % every == 0 or i == cycles:
                cp = await checkpoint(sup, i, started)
                out.checkpoints.append(cp)
                _say(spawner, cp)
        out.seconds = time.monotonic() - started
    return out


def _say(spawner: str, cp: Checkpoint) -> None:
    print(
        f"  {spawner:6} {cp.cycles:5} cycles {cp.seconds:7.1f}s  rss {cp.rss_mib:6.1f} MiB  "
        f"fds {cp.fds:4}  leaked: {len(cp.leaked_processes)} processes, "
        f"{len(cp.leaked_cgroups)} cgroups",
        flush=True,
    )


# --- the mixed round ----------------------------------------------------------------------------


def _py(code: str) -> list[str]:
    return [sys.executable, "-I", "-c", code]


FAULTS: dict[str, tuple[list[str] | None, Limits]] = {
    "crashed": (_py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), Limits()),
    "timeout": (_py("import time; time.sleep(60)"), Limits(wall="1s")),
    "oversize": (_py(f"import os; os.write(1, b'x' * {2 * OVERSIZE_CAP})"), Limits()),
    "success": (None, Limits(wall="60s")),
}
"""Wanted kind → (command, or `None` for tether's own child on a scripted model; limits)."""


async def mixed(runs: int, workspace: Path) -> MixedRound:
    out = MixedRound(runs)
    config = ChildConfig(
        max_message_bytes=OVERSIZE_CAP,
        dispose=DisposePolicy(shutdown=1.0, eof=1.0, term=1.0, kill=2.0),
    )
    model = ScriptedModel.from_json(SCRIPT)
    wanted = [list(FAULTS)[i % len(FAULTS)] for i in range(runs)]

    async with Supervisor(config) as sup:
        # The supervisor's standing descriptors count before the round: one run first starts
        # its zygote (the default spawner of tether's own child), the zygote's next standby
        # cgroup (whose files stay open while it exists) and the sealing user namespace.
        warm = await sup.run("warm", agent="explorer", workspace=workspace, model=model)
        if not warm.success:
            out.wrong.append(f"warm-up → {warm.status}: {warm.message}")
        with anyio.fail_after(30):
            for handle in list(sup._handles):
                await handle.wait()
        out.fds_before = fd_count()

        async def one(want: str) -> None:
            command, limits = FAULTS[want]
            got: RunResult = await sup.run(
                "mixed",
                agent="explorer",
                workspace=workspace,
                command=command,
                model=model if command is None else None,
                limits=limits,
            )
            kind = "success" if got.success else (got.failure.kind if got.failure else got.status)
            out.kinds[kind] = out.kinds.get(kind, 0) + 1
            if kind != want:
                out.wrong.append(f"{want} → {kind}: {got.message}")

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for want in wanted:
                tg.start_soon(one, want)
        out.seconds = time.monotonic() - started
        out.after = await checkpoint(sup, runs, started)
    print(
        f"  mixed  {runs:5} runs at once {out.seconds:5.1f}s  kinds {out.kinds}  "
        f"wrong {len(out.wrong)}",
        flush=True,
    )
    return out


# --- report -------------------------------------------------------------------------------------


def markdown(
    soaks: list[SpawnerSoak],
    rounds: list[MixedRound],
    command: str,
    when: str,
    every: int,
    crashed: crash.Report | None = None,
) -> str:
    lines = [
        SOAK_HEADING,
        "",
        f"Written by `{command}` (`benchmarks/soak.py`; `scripts/bench` keeps this section). "
        "Each cycle is one real run, spawn to dispose, of tether's child on a scripted model; "
        f"cycles run one after another, and every {every} the soak checks what is left (processes "
        "of this process's tree or carrying its tree marker beyond the supervisor's helpers, "
        "open descriptors against the first check, cgroups named for this process beyond the "
        "pool's ready children) and the supervisor process's RSS. The mixed round runs "
        "crash / timeout / oversize / success children all at once and checks each kind.",
        "",
        f"- {when}; containment tier `{host().tier}`; "
        + "; ".join(f"{k}: {v}" for k, v in machine().items() if k in ("CPU", "kernel")),
        "",
        "| spawner | cycles | seconds | cycles/s | RSS first → last check | growth | "
        "leaked processes | leaked fds | leaked cgroups | failed cycles |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in soaks:
        first, last = s.checkpoints[0], s.checkpoints[-1]
        name = s.spawner + (f" ({s.pooled} pooled)" if s.spawner == "pool" else "")
        lines.append(
            f"| {name} | {s.cycles} | {s.seconds:.1f} | {s.per_second:.1f} | "
            f"{first.rss_mib:.1f} → {last.rss_mib:.1f} MiB (cycle {first.cycles} → "
            f"{last.cycles}) | {s.rss_growth_mib:+.1f} MiB | {s.leaked_processes} | "
            f"{s.fd_growth} | {s.leaked_cgroups} | {len(s.failed)} |"
        )
    for r in rounds:
        after = r.after
        leaks = (
            f"{len(after.leaked_processes)} processes, {after.fds - r.fds_before} fds, "
            f"{len(after.leaked_cgroups)} cgroups left"
            if after is not None
            else ""
        )
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(r.kinds.items()))
        lines += [
            "",
            f"Mixed round: {r.runs} runs at once in {r.seconds:.1f} s ({kinds}); "
            f"{r.runs - len(r.wrong)} of {r.runs} with the right kind; afterwards {leaks}.",
        ]
    if crashed is not None:
        lines += ["", crash.markdown(crashed).rstrip("\n")]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tether's soak: cycles per spawner, leak checks")
    ap.add_argument("--cycles", type=int, default=1000, help="cycles per spawner (1000)")
    ap.add_argument("--every", type=int, default=100, help="check for leaks every N (100)")
    ap.add_argument("--spawners", default=",".join(SPAWNERS), help="exec,zygote,pool")
    ap.add_argument("--mixed", type=int, default=64, help="runs in the mixed round (64; 0: none)")
    ap.add_argument(
        "--crash", type=int, default=200, help="SIGKILLs in the crash round (200; 0: none)"
    )
    ap.add_argument("--crash-seed", type=int, default=1, help="the crash round's seed (1)")
    ap.add_argument("--write", action="store_true", help="update docs/performance.md's Soak")
    ap.add_argument("--out", type=Path, default=PERFORMANCE, help="the file --write updates")
    ap.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = ap.parse_args(argv)
    spawners = [s for s in args.spawners.split(",") if s]
    unknown = set(spawners) - set(SPAWNERS)
    if unknown or args.cycles < 1 or args.every < 1 or args.mixed < 0 or args.crash < 0:
        ap.error(f"bad arguments (unknown spawners: {sorted(unknown)})")
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_at_start = os.getloadavg()[0]
    command = "scripts/soak" + (" " + " ".join(argv) if argv else " " + " ".join(sys.argv[1:]))

    async def everything() -> tuple[list[SpawnerSoak], list[MixedRound], crash.Report | None]:
        with tempfile.TemporaryDirectory(prefix="tether-soak-") as tmp:
            ws = Path(tmp)
            (ws / "notes.txt").write_text("a note\n")
            soaks = []
            for spawner in spawners:
                print(f"== {spawner}: {args.cycles} cycles", flush=True)
                soaks.append(await soak(spawner, args.cycles, args.every, ws))
            rounds = []
            if args.mixed:
                print(f"== mixed round: {args.mixed} runs at once", flush=True)
                rounds.append(await mixed(args.mixed, ws))
            crashed = None
            if args.crash:
                print(f"== crash round: {args.crash} SIGKILLs", flush=True)
                crashed = await anyio.to_thread.run_sync(
                    crash.run, args.crash, args.crash_seed, Path(tmp) / "crash"
                )
            return soaks, rounds, crashed

    soaks, rounds, crashed = anyio.run(everything)
    load_at_end = os.getloadavg()[0]
    load = f"load average (1 min) {load_at_start:.1f} at the start, {load_at_end:.1f} at the end"
    text = markdown(soaks, rounds, command.strip(), f"{when}; {load}", args.every, crashed)
    print()
    print(text)
    if args.write:
        previous = args.out.read_text() if args.out.exists() else ""
        args.out.write_text(with_section(previous, SOAK_HEADING, text))
        print(f"wrote the Soak section of {args.out}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "soaks": [
                        {
                            **asdict(s),
                            "perSecond": s.per_second,
                            "rssGrowthMiB": s.rss_growth_mib,
                            "fdGrowth": s.fd_growth,
                            "leakedProcesses": s.leaked_processes,
                            "leakedCgroups": s.leaked_cgroups,
                            "clean": s.clean,
                        }
                        for s in soaks
                    ],
                    "mixed": [{**asdict(r), "clean": r.clean} for r in rounds],
                    "crash": crashed.summary() if crashed is not None else None,
                },
                indent=1,
            )
        )
    problems = [s.spawner for s in soaks if not s.clean] + ["mixed" for r in rounds if not r.clean]
    if crashed is not None and crashed.violations:
        problems.append("crash")
    if problems:
        print(f"soak: NOT clean: {', '.join(problems)}", file=sys.stderr)
        for s in soaks:
            for why in s.failed[:5]:
                print(f"  {s.spawner}: {why}", file=sys.stderr)
        for r in rounds:
            for why in r.wrong[:10]:
                print(f"  mixed: {why}", file=sys.stderr)
        for why in crashed.violations[:10] if crashed is not None else []:
            print(f"  crash: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
