"""The `inprocess` provider: tether's own agent loop and tools, served inside the parent's own
process on the in-memory transport — no process, so no process isolation at all.

For trusted, latency-critical work and for tests. The run is a tether child's in every way the
supervisor drives it (the run handle, its clocks, cancel, budgets, approvals, follow-ups of a
continuable run), with the child runtime as a task over in-memory streams instead of a
process: see `tether.parent.run.transport.memory` for what holds there and what does not.
The result says so: `isolation.level` is `none`, with a warning.
"""

from __future__ import annotations

import dataclasses

from tether.parent.run.provider import Provider, SubagentRequest
from tether.parent.run.transport import MEMORY


class InProcessProvider(Provider):
    name = "inprocess"
    summary = "tether's agent loop in the parent's own process (no process isolation)"
    isolated = False
    tether_runtime = True

    def problem(self, argument: str | None = None) -> str | None:
        if argument is not None:
            return f"{self.name} takes no argument"
        return None

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        if request.argument is not None:
            raise ValueError(f"provider {self.name!r} takes no argument")
        if request.command_given:
            raise ValueError(f"provider {self.name!r} runs tether's own loop; it takes no command")
        return request.replace(config=dataclasses.replace(request.config, transport=MEMORY))


__all__ = ["InProcessProvider"]
