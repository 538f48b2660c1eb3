"""One run's trace: the lines the parent writes for it, built from what its broker served.

The broker and the run handle call a `RunTrace` at each step — a model call answered or
refused, an event the child sent, a parent tool served, an approval, a follow-up, a result —
and it turns each into a line of `format.py`, passes it through the run's `Redactor` and hands
it to its `TraceFile` (`writer.py`), which never makes the caller wait. Nothing is recorded
once tracing of the run has stopped; `report()` is what the run's result says of its trace.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import msgspec

from tether.parent.trace.format import (
    AgentBound,
    Approval,
    ChildReport,
    FollowUp,
    Header,
    Outcome,
    ParentToolCall,
    Purpose,
    Slot,
    Stopped,
    Turn,
    TurnError,
    TurnRequest,
    _Line,
    encode,
    kind_of,
)
from tether.parent.trace.redact import Redactor
from tether.parent.trace.spec import SUFFIX, TraceSpec
from tether.parent.trace.writer import FLUSH_SECONDS, TraceFile
from tether.protocol.messages import (
    AgentEventParams,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolApproveParams,
    ToolApproveResult,
    ToolCallParams,
    ToolCallResult,
    TraceReport,
)

REPORTED = frozenset({"tool_call", "tool_result"})
"""The child's event kinds a trace keeps (its report of the tools it ran)."""

Began = tuple[int, float, float]
"""A call's number in the run, and its wall and monotonic start."""


class RunTrace:
    def __init__(self, spec: TraceSpec, header: Header, secrets: Iterable[str] = ()) -> None:
        self.spec = spec
        self.run_id = header.run_id
        self._redact = Redactor(secrets)
        self.file = TraceFile(
            str(spec.dir),
            f"{header.run_id}{SUFFIX}",
            append_to=spec.file,
            max_bytes=spec.max_bytes,
            buffer_bytes=spec.buffer_bytes,
            stop_line=self._stop_line,
        )
        self.activation = 0
        self._calls = 0
        self._put(header)

    @property
    def path(self) -> str:
        return self.file.path

    def conceal(self, secret: str) -> None:
        """Keep `secret` (a capability token the run was given, say) out of the trace."""
        self._redact.add(secret)

    # --- the file's life (the run's task) ------------------------------------------------------

    async def drain(self) -> None:
        """Open the file and write the lines as they come, until `aclose` (the run's task
        runs it; a file that cannot be opened stops the trace, see `report`)."""
        await self.file.drain()

    async def flush(self, seconds: float = FLUSH_SECONDS) -> None:
        await self.file.flush(seconds)

    async def aclose(self, seconds: float = FLUSH_SECONDS) -> None:
        await self.file.aclose(seconds)

    def report(self) -> TraceReport:
        return TraceReport(path=self.path, bytes=self.file.size, stopped=self.file.stopped)

    # --- lines ---------------------------------------------------------------------------------

    def begin(self) -> Began:
        """Mark a model call's arrival: its number in the run and when."""
        self._calls += 1
        return (self._calls, time.time(), time.monotonic())

    def clock(self) -> Began:
        """Mark the arrival of another request (a parent tool's): when."""
        return (0, time.time(), time.monotonic())

    def turn(
        self,
        params: ModelCompleteParams,
        began: Began,
        *,
        slot: Slot | None,
        model: str | None,
        response: ModelCompleteResult | None = None,
        error: TurnError | None = None,
    ) -> None:
        index, wall, mono = began
        purpose: Purpose = params.purpose
        self._put(
            Turn(
                run_id=self.run_id,
                wall=wall,
                mono=mono,
                index=index,
                activation=self.activation,
                purpose=purpose,
                slot=slot,
                model=model,
                request=TurnRequest(
                    model=params.model, messages=params.messages, tools=params.tools
                ),
                response=response,
                error=error,
                seconds=round(time.monotonic() - mono, 6),
            )
        )

    def child_event(self, params: AgentEventParams) -> None:
        if params.kind in REPORTED:
            self._put(
                ChildReport(
                    **self._now(),
                    event=params.kind,  # type: ignore[arg-type]
                    seq=params.seq,
                    data=params.data,
                )
            )

    def parent_tool(
        self,
        params: ToolCallParams,
        began: Began,
        result: ToolCallResult | None = None,
        error: TurnError | None = None,
    ) -> None:
        _, wall, mono = began
        self._put(
            ParentToolCall(
                run_id=self.run_id,
                wall=wall,
                mono=mono,
                name=params.name,
                call_id=params.call_id,
                arguments=params.arguments,
                result=result,
                error=error,
                seconds=round(time.monotonic() - mono, 6),
            )
        )

    def approval(self, params: ToolApproveParams, answer: ToolApproveResult) -> None:
        self._put(
            Approval(
                **self._now(),
                tool=params.tool,
                arguments=params.arguments,
                allow=answer.allow,
                reason=answer.reason,
            )
        )

    def follow_up(self, text: str) -> None:
        """A follow-up message: the next activation starts."""
        self.activation += 1
        self._put(FollowUp(**self._now(), activation=self.activation, text=text))

    def result(self, result: RunResult) -> None:
        self._put(Outcome(**self._now(), activation=self.activation, result=result))

    def agent(self, agent_id: str) -> None:
        self._put(AgentBound(**self._now(), agent_id=agent_id))

    def _now(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "wall": time.time(), "mono": time.monotonic()}

    def _put(self, line: _Line) -> None:
        if self.file.stopped is not None:
            return
        try:
            data = encode(line)
        except (msgspec.EncodeError, UnicodeEncodeError) as exc:
            # Not a string JSON can hold (a provider's lone surrogate, say): the trace cannot
            # be complete from here, and the run must not fail for it.
            self.file.stop(f"a {kind_of(line)} line could not be written as JSON: {exc}")
            return
        self.file.put(self._redact(data))

    def _stop_line(self, reason: str, size: int) -> bytes:
        return encode(Stopped(**self._now(), reason=reason, bytes=size))
