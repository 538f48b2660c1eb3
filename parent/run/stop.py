"""A stop that proves it stopped: the runs one stop takes down together, and the receipt the
parent measures of it (`StopReceipt`, in the stopped run's result).

Theory of operation
-------------------
A `StopLine` holds the runs one stop takes down together. Every `RunHandle` has its own, holding
itself; an orchestrator's also holds every sub-agent run started on its behalf (the
delegation's runner adds them), and a tool call served over MCP has one for the runs it
started. `ask(reason)` is the instant of the stop, recorded once on both clocks:

- every run's brokers refuse every request from that instant (`Broker.stop`): no model turn,
  approval or parent tool is served any more, and the ones in flight are abandoned — a model
  turn under way is cancelled, its answer never delivered, its tokens never billed;
- every run is then taken down: `spare` (the run whose own `cancel()` asked, which first asks
  its child to abort and cuts it after the grace) its own way, every other run at once
  (`abort`). A run added to a line already stopped is stopped as it joins.

`receipt()` is called once the asking run's child is gone (it waits, bounded, for the others):
one more snapshot of /proc, taken after every dispose (`tree.fresh_snapshot`, what the ladder's
sweep reads), counts what is alive of each stopped child's tree (`still_alive`: its session,
process group, tree marker and cgroup); the furthest rung any ladder reached; and what the
brokers counted after the instant of the stop (turns admitted, tokens billed: both 0 unless
something is wrong) or abandoned. It is computed once per line and kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio

from tether.parent.process.tree import fresh_snapshot
from tether.protocol.messages import RUNGS, Rung, StopReceipt

if TYPE_CHECKING:
    from tether.parent.process.supervised import SupervisedProcess
    from tether.parent.run.broker import Broker

RECEIPT_WAIT = 60.0
"""At most this long for every run of a line to be gone before the receipt counts what is left
(every ladder is bounded well within it)."""


class Stoppable(Protocol):
    """What a line needs of a run (`RunHandle` is one)."""

    @property
    def processes(self) -> list[SupervisedProcess]: ...

    @property
    def halted(self) -> list[Broker]: ...

    @property
    def gone(self) -> bool: ...

    def halt(self, why: str) -> None: ...

    def abort(self, reason: str = ...) -> None: ...

    async def wait(self) -> None: ...


@dataclass(frozen=True)
class Stop:
    reason: str
    at: float
    """`time.monotonic()` when it was asked."""
    wall: float
    """`time.time()` at the same moment."""


class StopLine:
    """The runs one stop takes down together (see the module docstring)."""

    def __init__(self) -> None:
        self.runs: list[Stoppable] = []
        self.stop: Stop | None = None
        self.stopped_runs: list[Stoppable] = []
        """The runs the stop took down: those not yet over when it was asked, and any added
        after."""
        self._receipt: StopReceipt | None = None
        self._lock = anyio.Lock()

    @property
    def stopped(self) -> bool:
        return self.stop is not None

    def add(self, run: Stoppable) -> None:
        """Take `run` down with this line; at once if the line is already stopped."""
        if any(r is run for r in self.runs):
            return
        self.runs.append(run)
        if self.stop is not None:
            self.stopped_runs.append(run)
            run.halt(self.stop.reason)
            run.abort(self.stop.reason)

    def ask(self, reason: str, *, spare: Stoppable | None = None) -> Stop:
        """The instant of the stop (the first ask counts): every run's brokers refuse from now,
        and every run but `spare` is cut now."""
        if self.stop is None:
            self.stop = Stop(reason, time.monotonic(), time.time())
            self.stopped_runs = [run for run in self.runs if not run.gone or run is spare]
            for run in self.stopped_runs:
                run.halt(reason)
            for run in list(self.stopped_runs):
                if run is not spare:
                    run.abort(reason)
        return self.stop

    async def receipt(self, *, gone: Stoppable | None = None) -> StopReceipt:
        """The stop's receipt, once every run is gone (`gone`: one the caller knows is, whose
        `wait()` it must not wait on: the run computing its own result)."""
        stop = self.stop
        assert stop is not None, "receipt() of a line nobody stopped"
        # Shielded whole: a result waits on it, and a cancelled caller must not leave it unmade.
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._receipt is None:
                    with anyio.move_on_after(RECEIPT_WAIT):
                        for run in list(self.stopped_runs):
                            if run is not gone:
                                await run.wait()
                    self._receipt = await self._measure(stop)
                receipt = self._receipt
        return receipt

    async def _measure(self, stop: Stop) -> StopReceipt:
        snap = await fresh_snapshot()
        done = time.monotonic()
        # What is left: of every run the line ever held. The rung: of the ones the stop took.
        left = sum(len(p.still_alive(snap)) for run in self.runs for p in run.processes)
        rung: Rung = "none"
        for p in (p for run in self.stopped_runs for p in run.processes):
            if p.disposed is not None and RUNGS.index(p.disposed.rung) > RUNGS.index(rung):
                rung = p.disposed.rung
        brokers = list({id(b): b for run in self.stopped_runs for b in run.halted}.values())
        return StopReceipt(
            reason=stop.reason,
            asked_at=stop.wall,
            gone_at=stop.wall + (done - stop.at),
            seconds=done - stop.at,
            rung=rung,
            runs=len(self.stopped_runs),
            processes_left=left,
            turns_after_stop=sum(b.turns_after_stop for b in brokers),
            turns_abandoned=sum(b.turns_abandoned for b in brokers),
            tokens_after_stop=sum(b.tokens_after_stop for b in brokers),
        )


def describe(receipt: StopReceipt) -> str:
    """The receipt in one line, for a terminal or a log."""
    asked = time.strftime("%H:%M:%S", time.localtime(receipt.asked_at))
    runs = f"{receipt.runs} runs" if receipt.runs != 1 else "1 run"
    return (
        f"stopped ({receipt.reason}): asked {asked}, everything gone {receipt.seconds:.2f} s "
        f"later ({runs}, ladder rung {receipt.rung}); {receipt.processes_left} processes left, "
        f"{receipt.turns_after_stop} model turns admitted after the stop "
        f"({receipt.turns_abandoned} in flight abandoned), {receipt.tokens_after_stop} tokens "
        "billed after it"
    )
