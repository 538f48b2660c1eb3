"""A stop that proves it stopped: an orchestration whose sub-agents run bash loops that write
files (as daemons that escaped the tool's process group, like an orphaned `rm -rf`) and keep
calling the model is stopped, and every number of the receipt in its result is checked
against what the test saw from outside: the clock around the stop, the model's own record of
every turn (started, answered, abandoned, tokens), the processes on the host and the files
that stop growing."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.parent import Supervisor
from tether.parent.delegation.orchestrator import Running
from tether.parent.run.events import Event, RunFinished, RunStarted
from tether.protocol.messages import (
    RUNGS,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    Usage,
)

pytestmark = pytest.mark.anyio

TURN = Usage(input_tokens=100, output_tokens=10)
BLOCK_AT = 4
"""Sub-agent B's model turn that never comes back (in flight when the stop comes)."""


class Turn:
    def __init__(self, who: str) -> None:
        self.who = who
        self.started = time.time()
        self.answered: float | None = None
        self.abandoned: float | None = None


class LoopingModel:
    """The orchestrator delegates A, then B; A starts a daemon loop and completes (its child
    then idles, frozen); B starts one and then keeps running a foreground loop, turn after
    turn, until its turn `BLOCK_AT`, which never answers. Every turn is recorded."""

    def __init__(self, ws: Path, token: str) -> None:
        self.ws, self.token = ws, token
        self.turns: list[Turn] = []
        self.blocked = anyio.Event()
        self._ids = 0

    def _daemon(self, name: str) -> str:
        path = self.ws / name
        loop = f"while :; do date +%s.%N >> {path}; sleep 0.05; done # {self.token}"
        # Back only once the loop has written: until its `setsid` the daemon is still in the
        # tool's process group, which the tool takes down when the command returns.
        started = f"while [ ! -s {path} ]; do sleep 0.01; done"
        return f"touch {path}; setsid -f bash -c '{loop}' >/dev/null 2>&1; {started}; echo started"

    def _call(self, name: str, **arguments: Any) -> ToolCall:
        self._ids += 1
        return ToolCall(id=f"t{self._ids}", name=name, arguments=arguments)

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        first = next(m.content for m in params.messages if m.role == "user")
        who = "A" if "loop A" in first else "B" if "loop B" in first else "orchestrator"
        n = sum(m.role == "assistant" for m in params.messages) + 1
        turn = Turn(who)
        self.turns.append(turn)
        try:
            if who == "B" and n == BLOCK_AT:
                self.blocked.set()
                await anyio.sleep_forever()
            calls = self._plan(who, n)
        except BaseException:
            turn.abandoned = time.time()
            raise
        turn.answered = time.time()
        message = ChatMessage(role="assistant", content=f"{who} {n}", tool_calls=calls)
        return ModelCompleteResult(message=message, usage=TURN, stop_reason="tool_use")

    def _plan(self, who: str, n: int) -> list[ToolCall]:
        if who == "orchestrator":
            if n > 2:
                return [self._call("complete", summary="all delegated")]
            name = "AB"[n - 1]
            return [
                self._call(
                    "task",
                    subagent_type="general",
                    description=f"loop {name}",
                    prompt=f"loop {name}",
                    readOnly=False,
                )
            ]
        if n == 1:
            return [self._call("bash", command=self._daemon(f"{who}.bg"))]
        if who == "A":
            return [self._call("complete", summary="A loops in the background")]
        fg = self.ws / "B.fg"
        loop = f"for i in 1 2 3; do date +%s.%N >> {fg}; sleep 0.05; done"
        return [self._call("bash", command=loop)]


def _looping(token: str) -> list[int]:
    """The test's own look at the host: every process running one of its loops."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


def _sizes(ws: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(ws.glob("*.?g"))}


async def test_stopping_an_orchestration_proves_every_number_of_its_receipt(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    token = f"tether-stop-{secrets.token_hex(6)}"
    model = LoopingModel(ws, token)
    started: dict[str, int] = {}
    finished: dict[str, Any] = {}

    def watch(event: Event) -> None:
        if isinstance(event, RunStarted):
            started[event.run_id] = event.pid
        elif isinstance(event, RunFinished):
            finished[event.run_id] = event.result

    running: list[Running] = []
    async with Supervisor(state_dir=tmp_path / "state") as sup:
        sup.subscribe(watch)
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: sup.orchestrate(
                    "orchestrate two loops",
                    model=model,
                    workspace=ws,
                    read_only=False,
                    continuable=True,
                    keep_alive=300,
                    on_start=running.append,
                )
            )
            with anyio.fail_after(120):
                await model.blocked.wait()
                while not (ws / "B.fg").exists() or len(_looping(token)) < 2:
                    await anyio.sleep(0.02)
                before = _sizes(ws)
                await anyio.sleep(0.3)
            assert all(_sizes(ws)[n] >= before[n] for n in before)
            assert _sizes(ws)["B.bg"] > before["B.bg"]  # B's daemon loops on
            assert _sizes(ws)["A.bg"] == before["A.bg"]  # A idles: its tree is held still
            live_before = set(_looping(token))
            assert len(live_before) == 2
            live_runs = {run for run, pid in started.items() if _alive(pid)}

            asked_before = time.time()
            result = await running[0].handle.cancel("the test stops it")
            returned = time.time()
            tg.cancel_scope.cancel()

        receipt = result.stop
        assert receipt is not None, result
        assert receipt.reason == "the test stops it"
        # When: asked inside the call, everything gone before it returned.
        assert asked_before <= receipt.asked_at <= returned
        assert receipt.asked_at <= receipt.gone_at <= returned
        assert abs(receipt.gone_at - receipt.asked_at - receipt.seconds) < 0.05
        # Nothing left: the loops' processes are gone and their files no longer grow.
        assert receipt.processes_left == 0
        assert _looping(token) == [] and all(not _alive(pid) for pid in live_before)
        after = _sizes(ws)
        await anyio.sleep(0.5)
        assert _sizes(ws) == after
        # The model: no turn began after the ask, and the one in flight was abandoned unbilled.
        assert [t for t in model.turns if t.started >= receipt.asked_at] == []
        assert receipt.turns_after_stop == 0
        abandoned = [t for t in model.turns if t.abandoned is not None]
        assert len(abandoned) == receipt.turns_abandoned == 1
        assert abandoned[0].who == "B" and abandoned[0].abandoned >= receipt.asked_at
        late = [t for t in model.turns if t.answered is not None and t.answered >= receipt.asked_at]
        assert late == [] and receipt.tokens_after_stop == 0
        # What the runs billed is exactly the turns the model answered, all before the ask.
        answered = [t for t in model.turns if t.answered is not None]
        billed = sum(r.usage.input_tokens + r.usage.output_tokens for r in finished.values())
        assert billed == len(answered) * (TURN.input_tokens + TURN.output_tokens)
        # The runs: those whose child was alive at the stop — the orchestrator, A (answered,
        # idling warm) and B (working).
        assert len(live_runs) == receipt.runs == 3
        # The rung: the furthest any stopped child's ladder needed, as each result says.
        rungs = [
            r.failure.rung for r in finished.values() if r.failure is not None and r.failure.rung
        ]
        assert receipt.rung in RUNGS and receipt.rung != "none"
        assert RUNGS.index(receipt.rung) >= max(RUNGS.index(r) for r in rungs)
        assert result.status == "aborted" and not result.success


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False
