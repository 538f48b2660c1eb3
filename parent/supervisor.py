"""`Supervisor`: the supervisor's core (`run.core.SupervisorCore`: runs, their children and
their teardown) with what sits above it — continuable agents (`agents/`) and orchestration
(`delegation/`) — so one object does all of it.

The core knows nothing of these layers (no import reaches up from `run/`); this class is the
one place they are put together. The agents and their session store open on first use and
close, leases released, once every run is done (`_close_services`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tether.parent.process.config import ChildConfig, PoolSpec
from tether.parent.run.core import SupervisorCore
from tether.parent.run.handle import RunHandle
from tether.parent.trace.spec import TraceOption
from tether.protocol.messages import RunResult

if TYPE_CHECKING:
    from tether.parent.agents.service import AgentHandle, Agents
    from tether.parent.agents.sessions import AgentSummary, LeasePolicy
    from tether.parent.delegation.orchestrator import Orchestration
    from tether.parent.egress.seat import EgressOptions


class Supervisor(SupervisorCore):
    """Owns children and their teardown. Use as `async with Supervisor() as sup:`."""

    def __init__(
        self,
        config: ChildConfig | None = None,
        *,
        pool: PoolSpec | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        trace: TraceOption = None,
        lease: LeasePolicy | None = None,
        egress: EgressOptions | None = None,
    ) -> None:
        """`state_dir`: where continuable agents' sessions are stored (default
        `$XDG_STATE_HOME/tether`); opened on first use of `spawn_agent` and the like.
        `trace`: trace every run (a directory, or a `TraceSpec`; docs/traces.md). `lease`:
        when another process may take an agent over from a holder that stopped renewing
        (`LeasePolicy`; default: stale after 60 s, renewed every 15 s). `egress`: see
        `SupervisorCore`."""
        super().__init__(config, pool=pool, trace=trace, egress=egress)
        self._state_dir = state_dir
        self._lease = lease
        self._agents: Agents | None = None

    async def _close_services(self) -> None:
        if self._agents is not None:
            await self._agents.aclose()  # leases released, the store closed

    async def orchestrate(self, prompt: str, **kwargs: Any) -> Orchestration:
        """Run an orchestrator on `prompt`: a child whose model delegates to sub-agents (each a
        child of this supervisor) through the `task` tool; see
        `tether.parent.delegation.orchestrator.orchestrate` for the arguments (`model=` is
        required). Returns the orchestrator's result, every task call and the usage ledger."""
        from tether.parent.delegation.orchestrator import orchestrate

        return await orchestrate(self, prompt, **kwargs)

    # --- continuable agents (see agents/service.py) -------------------------------------------

    @property
    def agents(self) -> Agents:
        """This supervisor's continuable agents and their session store."""
        if self._agents is None:
            if self._tg is None:
                raise RuntimeError("use the Supervisor as `async with Supervisor() as sup:`")
            from tether.parent.agents.service import Agents

            self._agents = Agents(self, self._tg, self._state_dir, self._lease)
        return self._agents

    async def spawn_agent(self, prompt: str, **kwargs: Any) -> AgentHandle:
        """Start a continuable agent: a durable session and its first child, kept alive for
        `keep_alive` after each answer (`Agents.spawn`). `await handle.result()` for its
        first answer; `handle.id` for `send_message`."""
        return await self.agents.spawn(prompt, **kwargs)

    async def send_message(self, agent_id: str, message: str, **kwargs: Any) -> RunResult:
        """Continue an agent, warm in its live child or cold from its stored transcript
        (`Agents.send`)."""
        return await self.agents.send(agent_id, message, **kwargs)

    async def list_agents(self, **kwargs: Any) -> list[AgentSummary]:
        """The stored agents, most recently updated first (`Agents.list`)."""
        return await self.agents.list(**kwargs)


__all__ = ["ChildConfig", "PoolSpec", "RunHandle", "Supervisor"]
