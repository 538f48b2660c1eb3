"""Crash consistency under SIGKILL at any moment: a supervisor with continuable agents busy with
follow-ups (`crash_driver.py`) is SIGKILLed at random points, again and again, against one state
directory, and restarted each time; after every kill the store and the host are checked.

    python -m benchmarks.crash [--kills 200] [--seed 1] [--json FILE]

`scripts/soak --crash N` runs it at a large count; `tests/agents/test_crash_consistency.py` at a
small one. Each round starts the driver, picks a target from a seeded random schedule — during a
model turn (`turn`), while a turn or an answer is being stored (`append`, `settle`), during a
lease renewal (`heartbeat`, with the driver renewing every 0.2 s), during a cold resume
(`resume`), or after a random moment (`any`) — lets a random number of those go by, and SIGKILLs
the driver's process or (every other round, at random) its whole process group. Then:

1. nothing of the killed tree (the driver's descendants before the kill — the keeper, the
   zygote, agents' children — and anything carrying its tree marker) is alive 2 s after the kill;
2. `PRAGMA integrity_check` is `ok`;
3. every agent's stored transcript is whole: every row decodes, the agent's counters match its
   rows, its usage is exactly 10 in / 5 out per stored model turn (a turn and its usage are one
   transaction), every tool result answers a call of the turn before it, every call but the
   last turn's has its result, every user message is one a driver sent, and every follow-up
   whose answer was handed to the caller before the kill is there, in order, followed by that
   answer;
4. the next driver (the next round's) lists every agent with its last state (never `running`:
   a session whose holder died reads `interrupted`), resumes every agent cold and gets its
   activation: the time from the kill to each grant is the *takeover* time reported (the
   restart of a Python process included), beside how long `acquire` itself took.

A failed check is a violation (round, seed, what); the exit status is 1 if there is any.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import psutil

from benchmarks.crash_driver import AGENTS, TURN, answer_to
from tether.parent.agents.sessions import DB_NAME
from tether.parent.process.markers import TREE_ENV
from tether.protocol.messages import ChatMessage

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("turn", "append", "settle", "heartbeat", "resume", "any")
GONE_WITHIN = 2.0
"""Seconds after a kill by which nothing of the killed tree may be alive."""
DEADLINE = 90.0
"""For a driver to start, resume every agent, reach its target or exit."""
AIM = 3.0
"""The takeover time aimed for (kill → activation in the restarted process), reported."""

_decode = msgspec.json.Decoder(ChatMessage).decode


@dataclass
class Round:
    index: int
    kind: str
    """`process` (SIGKILL to the driver) or `group` (to its process group)."""
    target: str
    reached: bool = True
    """The target phase was seen before the kill (`False`: killed at the deadline instead)."""
    acks: int = 0
    """Follow-ups whose answer the driver handed over in this round."""
    takeover: list[float] = field(default_factory=list)
    """Seconds from the previous kill to each agent's activation in this round's driver."""
    acquire: list[float] = field(default_factory=list)
    """Seconds each of those `acquire` calls took."""
    took_over: list[str | None] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


@dataclass
class Report:
    seed: int
    kills: int
    rounds: list[Round] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def violations(self) -> list[str]:
        return [v for r in self.rounds for v in r.violations]

    @property
    def acked(self) -> int:
        return sum(r.acks for r in self.rounds)

    @property
    def takeovers(self) -> list[float]:
        return [t for r in self.rounds for t in r.takeover]

    @property
    def acquires(self) -> list[float]:
        return [t for r in self.rounds for t in r.acquire]

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        targets: dict[str, int] = {}
        for r in self.rounds[:-1] if len(self.rounds) > self.kills else self.rounds:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
            targets[r.target] = targets.get(r.target, 0) + 1
        takeovers = self.takeovers
        return {
            "seed": self.seed,
            "kills": self.kills,
            "byKind": kinds,
            "byTarget": targets,
            "acked": self.acked,
            "takeovers": len(takeovers),
            "maxTakeover": max(takeovers, default=0.0),
            "medianTakeover": sorted(takeovers)[len(takeovers) // 2] if takeovers else 0.0,
            "overAim": sum(t > AIM for t in takeovers),
            "maxAcquire": max(self.acquires, default=0.0),
            "violations": self.violations,
            "seconds": self.seconds,
        }


class Driver:
    """One `crash_driver.py` process, its lines parsed as they come."""

    def __init__(self, state: Path, workspace: Path, seed: int, beat: float | None, log: Path):
        argv = [sys.executable, "-m", "benchmarks.crash_driver", str(state), str(workspace)]
        argv += ["--seed", str(seed)] + (["--beat", str(beat)] if beat else [])
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, start_new_session=True
            )
        self._buf = b""
        self.granted: dict[str, tuple[float, float, str | None]] = {}
        self.acks: list[dict[str, Any]] = []
        self.sent: list[str] = []
        self.phases: list[str] = []
        self.listed: list[dict[str, str]] | None = None
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _take(self, line: bytes) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(line)
        if "granted" in event and event["granted"] not in self.granted:
            self.granted[event["granted"]] = (event["wall"], event["seconds"], event["tookOver"])
        elif "ack" in event:
            self.acks.append(event)
        elif "sending" in event:
            self.sent.append(event["message"])
        elif "phase" in event:
            self.phases.append(event["phase"])
        elif "listed" in event:
            self.listed = event["listed"]
        elif "stopped" in event:
            self.stopped = True
        return event

    def events(self, until: float) -> Iterator[dict[str, Any]]:
        """Events as they come, until the monotonic deadline `until` (or the end of output)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                yield self._take(line)
            left = until - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            self._buf += chunk

    def drain(self) -> None:
        """Every complete line left in the pipe (the driver is dead)."""
        for _ in self.events(time.monotonic() + 5.0):
            pass

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# --- what is left of a tree ------------------------------------------------------------------


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _marked(prefix: str) -> list[psutil.Process]:
    needle = f"{TREE_ENV}={prefix}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read():
                    found.append(psutil.Process(int(entry.name)))
        except (OSError, psutil.Error):
            continue
    return found


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def left_alive(before: list[psutil.Process], pid: int, killed_at: float) -> list[str]:
    """What of the killed tree is still alive `GONE_WITHIN` s after `killed_at` (monotonic);
    whatever it is gets killed, so the next round starts clean."""
    prefix = f"{pid}-"
    while True:
        left = [p for p in [*before, *_marked(prefix)] if _alive(p)]
        if not left or time.monotonic() - killed_at > GONE_WITHIN:
            break
        time.sleep(0.02)
    described = []
    for p in {p.pid: p for p in left}.values():
        try:
            described.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            p.kill()
        except psutil.Error:
            continue
    return described


# --- the store --------------------------------------------------------------------------------


@contextmanager
def _db(state: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(state / DB_NAME, timeout=30)
    try:
        yield conn
    finally:
        conn.close()


def check_store(
    state: Path, acked: dict[str, list[tuple[str, str, bool]]], sent: set[str]
) -> list[str]:
    """Violations of points 2 and 3 of the module docstring."""
    out: list[str] = []
    with _db(state) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchall()
        if integrity != [("ok",)]:
            return [f"integrity_check: {integrity[:5]}"]
        agents = conn.execute(
            "SELECT id, message_count, transcript_bytes, input_tokens, output_tokens FROM agents"
        ).fetchall()
        for agent_id, count, size, tokens_in, tokens_out in agents:
            rows = conn.execute(
                "SELECT body FROM messages WHERE agent_id = ? ORDER BY seq", (agent_id,)
            ).fetchall()
            try:
                transcript = [_decode(body) for (body,) in rows]
            except msgspec.DecodeError as exc:
                out.append(f"{agent_id}: a stored message does not decode: {exc}")
                continue
            if count != len(rows) or size != sum(len(body) for (body,) in rows):
                out.append(f"{agent_id}: counters {count}/{size} vs {len(rows)} rows")
            turns = sum(m.role == "assistant" for m in transcript)
            if (tokens_in, tokens_out) != (turns * TURN.input_tokens, turns * TURN.output_tokens):
                out.append(f"{agent_id}: usage {tokens_in}/{tokens_out} for {turns} stored turns")
            out += [f"{agent_id}: {why}" for why in _whole(transcript, sent)]
            out += [f"{agent_id}: {why}" for why in _acked(transcript, acked.get(agent_id, []))]
    return out


def _whole(transcript: list[ChatMessage], sent: set[str]) -> list[str]:
    """Every tool result answers a call of the turn before it; no turn or message follows a
    turn whose calls have no result (only the last turn may be cut off); every user message is
    one a driver sent (or an agent's first prompt)."""
    out = []
    open_calls: set[str] = set()
    for i, m in enumerate(transcript):
        if m.role in ("user", "assistant") and open_calls:
            out.append(f"message {i} ({m.role}) follows calls with no result: {sorted(open_calls)}")
            open_calls = set()
        if m.role == "user":
            if m.content not in sent and not m.content.startswith("start "):
                out.append(f"message {i} is a user message nobody sent: {m.content[:60]!r}")
        elif m.role == "assistant":
            open_calls = {c.id for c in m.tool_calls}
        elif m.role == "tool":
            if m.tool_call_id not in open_calls:
                out.append(f"message {i} answers {m.tool_call_id!r}, no open call of the turn")
            open_calls.discard(m.tool_call_id or "")
    return out


def _acked(transcript: list[ChatMessage], acked: list[tuple[str, str, bool]]) -> list[str]:
    """Every acknowledged follow-up, in order, each followed by its answer."""
    users = [(i, m.content) for i, m in enumerate(transcript) if m.role == "user"]
    at = 0
    for message, summary, success in acked:
        while at < len(users) and users[at][1] != message:
            at += 1
        if at == len(users):
            return [f"acknowledged {message!r} is not in the transcript (in order)"]
        start = users[at][0]
        end = users[at + 1][0] if at + 1 < len(users) else len(transcript)
        if success and summary == answer_to(message):
            answered = any(
                c.name == "complete" and c.arguments.get("summary") == summary
                for m in transcript[start:end]
                if m.role == "assistant"
                for c in m.tool_calls
            )
            if not answered:
                return [f"the answer to acknowledged {message!r} is not stored after it"]
        at += 1
    return []


def _listing(listed: list[dict[str, str]] | None, acked: dict[str, Any]) -> list[str]:
    """A restarted supervisor finds every agent answered so far, none of them `running`."""
    if listed is None:
        return ["the restarted driver never listed its agents"]
    found = {a["id"]: a["status"] for a in listed}
    out = [f"{agent} is not listed after the restart" for agent in acked if agent not in found]
    out += [f"{a} lists as {s} after its holder died" for a, s in found.items() if s == "running"]
    return out


# --- the rounds -------------------------------------------------------------------------------


def _reach(driver: Driver, target: str, rng: random.Random, rnd: Round) -> None:
    """Read the driver until the round's kill point."""
    until = time.monotonic() + DEADLINE
    if target != "resume":
        for _ in driver.events(until):
            if len(driver.granted) >= AGENTS:
                break
        if len(driver.granted) < AGENTS:
            rnd.violations.append(
                f"only {len(driver.granted)} of {AGENTS} agents got their activation within "
                f"{DEADLINE:g} s of the restart"
            )
        # Busy for a random while first, so kills land anywhere in a long conversation.
        for _ in driver.events(time.monotonic() + rng.uniform(0.0, 1.0)):
            pass
    if target == "any":
        for _ in driver.events(time.monotonic() + rng.uniform(0.0, 1.0)):
            pass
        return
    skip = rng.randrange(0, 4 if target in ("resume", "heartbeat") else 12)
    seen = 0
    for event in driver.events(until):
        if event.get("phase") == target:
            if seen == skip:
                time.sleep(rng.uniform(0.0, 0.003))
                return
            seen += 1
    rnd.reached = False


def run(kills: int, seed: int, root: Path, *, say: bool = True) -> Report:
    rng = random.Random(seed)
    report = Report(seed, kills)
    state, workspace = root / "state", root / "ws"
    root.mkdir(parents=True, exist_ok=True)
    state.mkdir(mode=0o700, exist_ok=True)
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("a note\n")
    log = root / "drivers.stderr"
    acked: dict[str, list[tuple[str, str, bool]]] = {}
    sent: set[str] = set()
    killed_at: float | None = None
    started = time.monotonic()
    # Every target in each run of len(TARGETS) rounds, in a random order; the kind alternates.
    schedule = [
        t for _ in range(kills // len(TARGETS) + 1) for t in rng.sample(TARGETS, len(TARGETS))
    ]
    first_kind = rng.randrange(2)
    for index in range(kills + 1):
        last = index == kills
        target = "any" if last else schedule[index]
        kind = ("process", "group")[(index + first_kind) % 2]
        rnd = Round(index, kind if not last else "sigterm", target)
        report.rounds.append(rnd)
        beat = 0.2 if target == "heartbeat" else None
        driver = Driver(state, workspace, rng.randrange(1 << 30), beat, log)
        try:
            _reach(driver, target, rng, rnd)
            if last:  # every agent resumed and answered once more before the clean stop
                for _ in driver.events(time.monotonic() + DEADLINE):
                    if len({a["ack"] for a in driver.acks}) >= AGENTS:
                        break
                else:
                    rnd.violations.append("not every agent answered after the last restart")
            before = _tree(driver.pid)
            if last:
                driver.proc.send_signal(signal.SIGTERM)  # a clean stop: the supervisor closes
                try:
                    driver.proc.wait(DEADLINE)
                except subprocess.TimeoutExpired:
                    rnd.violations.append("the last driver did not stop on SIGTERM")
            elif kind == "group":
                os.killpg(driver.pid, signal.SIGKILL)
            else:
                os.kill(driver.pid, signal.SIGKILL)
            now = time.monotonic()
            now_wall = time.time()
            driver.proc.wait()
            driver.drain()
            if last and (not driver.stopped or driver.proc.returncode != 0):
                rnd.violations.append(
                    f"the last driver did not close cleanly (exit {driver.proc.returncode})"
                )
            rnd.violations += [
                f"alive after the kill: {p}" for p in left_alive(before, driver.pid, now)
            ]
        finally:
            driver.close()
        if killed_at is not None:
            rnd.violations += _listing(driver.listed, acked)
            for wall, seconds, why in driver.granted.values():
                rnd.takeover.append(wall - killed_at)
                rnd.acquire.append(seconds)
                rnd.took_over.append(why)
        killed_at = now_wall
        sent.update(driver.sent)
        for ack in driver.acks:
            acked.setdefault(ack["ack"], []).append(
                (ack["message"], ack["summary"], ack["success"])
            )
        rnd.acks = len(driver.acks)
        rnd.violations += check_store(state, acked, sent)
        rnd.violations = [
            f"round {index} (seed {seed}, {kind}, {target}): {v}" for v in rnd.violations
        ]
        if say:
            print(
                f"  round {index:4} {rnd.kind:7} {target:9} acks {rnd.acks:4}  takeover "
                f"{max(rnd.takeover, default=0.0):5.2f}s  violations {len(rnd.violations)}",
                flush=True,
            )
            for v in rnd.violations:
                print(f"    {v}", flush=True)
    report.seconds = time.monotonic() - started
    return report


def markdown(report: Report) -> str:
    s = report.summary()
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(s["byKind"].items()))
    targets = ", ".join(f"{k} {n}" for k, n in sorted(s["byTarget"].items()))
    return (
        f"Crash round (`benchmarks/crash.py`, seed {s['seed']}): {s['kills']} SIGKILLs of a "
        f"supervisor with {AGENTS} continuable agents busy with follow-ups ({kinds}; at "
        f"{targets}), "
        f"restarted on the same state directory each time, in {s['seconds']:.0f} s; "
        f"{s['acked']} acknowledged follow-ups, every one stored with its answer in order; "
        f"{len(s['violations'])} violations. Takeover (kill → activation in the restarted "
        f"process): median {s['medianTakeover']:.2f} s, max {s['maxTakeover']:.2f} s "
        f"({s['overAim']} of {s['takeovers']} over {AIM:g} s); `acquire` itself at most "
        f"{s['maxAcquire'] * 1000:.1f} ms.\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="SIGKILL a busy supervisor again and again")
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", type=Path, help="where the state goes (default: a temporary one)")
    ap.add_argument("--json", type=Path, help="write the report here as JSON")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tether-crash-") as tmp:
        report = run(args.kills, args.seed, args.dir or Path(tmp))
    print(markdown(report))
    if args.json:
        args.json.write_text(
            json.dumps({**report.summary(), "rounds": [asdict(r) for r in report.rounds]}, indent=1)
        )
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
