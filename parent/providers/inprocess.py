"""The `inprocess` provider: tether's own agent loop and tools, served inside the parent's own
process over in-memory streams — no process, so no process isolation at all.

For trusted, latency-critical work and for tests. The run is the same conversation a child
process has (`initialize`, `agent/run`, `model/complete` and `tool/approve` through the run's
broker, events, `agent/cancel`), with the child runtime (`tether.child.server.serve_streams`)
as a task of the run and the parent's `Endpoint` on the other end of two `memory_pipe`s; so
budgets, approvals, explore mode and the workspace confinement of the tools hold as they do in
a child. What does not: the environment scrub, limits on memory, CPU, processes and files,
the containment tier and the sandbox. The tools run with the supervisor's own privileges;
`bash` commands get the scrubbed environment a child would have (never the supervisor's
keys), run in their own process group and are killed when they end or time out, but they are
the supervisor's children. The result says so: `isolation.level` is `none`, with a warning.

Clocks: the handshake timeout, the wall clock and the idle clock as for a child. Ending the run
closes the runtime's input (its lifeline); a runtime that does not stop within the config's
EOF grace is cancelled, which in-process always works.

This is the one module of the parent that imports `tether.child` (lazily, when a run starts):
the exception to "parent never imports child" that tests/protocol/test_import_discipline.py
names. It runs on the asyncio backend only (the child runtime's tools use asyncio).
"""

from __future__ import annotations

import logging
import math
import os
import time

import anyio

from tether.parent.process.classify import Observed
from tether.parent.process.config import ChildConfig
from tether.parent.process.isolation import Choice
from tether.parent.process.spawn import child_env, version
from tether.parent.run.events import RunStarted
from tether.parent.run.provider import Provider, SubagentRequest, SubagentRun
from tether.protocol import (
    ConnectionClosed,
    LocalProtocolError,
    RemoteError,
    RemoteProtocolError,
)
from tether.protocol.connection import Connection
from tether.protocol.messages import (
    PROTOCOL_VERSION,
    ClientCapabilities,
    InitializeParams,
    PeerInfo,
    RunResult,
)
from tether.wire import Endpoint, memory_pipe
from tether.wire.child_session import ChildSession

log = logging.getLogger("tether.parent")

WARNING = (
    "the run was served inside the supervisor's own process (provider 'inprocess'): no "
    "process isolation, no sandbox, no limits on memory, CPU, processes or files; its tools "
    "ran with the supervisor's privileges"
)
ARGV = ("<in-process>",)


class InProcessProvider(Provider):
    name = "inprocess"
    summary = "tether's agent loop in the parent's own process (no process isolation)"
    isolated = False
    tether_runtime = True
    once_because = (
        "it serves tether's loop inside the parent's own process, and keeps nothing of the run "
        "after it answers"
    )

    def problem(self, argument: str | None = None) -> str | None:
        if argument is not None:
            return f"{self.name} takes no argument"
        return None

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        if request.argument is not None:
            raise ValueError(f"provider {self.name!r} takes no argument")
        if request.command_given:
            raise ValueError(f"provider {self.name!r} runs tether's own loop; it takes no command")
        return request

    def isolation(self, chosen: Choice, config: ChildConfig) -> Choice:
        if config.isolation != "auto":
            raise ValueError(
                f"provider {self.name!r} runs in the supervisor's own process, without "
                f"isolation; it cannot give isolation={config.isolation!r} (leave it 'auto')"
            )
        return Choice("none", WARNING)

    async def run(self, run: SubagentRun) -> RunResult | None:
        from tether.child.server import serve_streams
        from tether.child.tools import ToolRegistry, default_tools
        from tether.child.tools.bash import BashTool

        _require_asyncio(self.name)
        cfg = run.config
        env = child_env(cfg)
        tools = ToolRegistry(
            BashTool(env=env) if tool.name == "bash" else tool for tool in default_tools()
        )
        factory = None
        spec = _agent_spec(cfg.command)
        if spec is not None:
            from tether.child.agent_spec import load_agent_factory

            factory = load_agent_factory(spec)
        observed = run.observed
        observed.limits = run.limits
        to_child_w, to_child_r = memory_pipe()
        to_parent_w, to_parent_r = memory_pipe()
        broker = run.broker
        endpoint = Endpoint(
            Connection("parent", max_message_bytes=cfg.max_message_bytes),
            to_parent_r,
            to_child_w,
            on_request=broker.on_request,
            on_notification=broker.on_notification,
            strict=True,
        )
        session = ChildSession(endpoint)
        stopped = anyio.Event()

        async def runtime() -> None:
            try:
                code = await serve_streams(
                    to_child_r, to_parent_w, tools=tools, agent_factory=factory
                )
                if code:
                    observed.exit_code = code
            finally:
                await to_parent_w.aclose()
                stopped.set()

        async def reader() -> None:
            end = await endpoint.run()
            if end.oversize:
                observed.oversize = end.oversize
            elif end.fault:
                observed.protocol_error = end.fault

        answer: RunResult | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(runtime)
            tg.start_soon(reader)
            run.publish(RunStarted(run.run_id, os.getpid(), ARGV))

            def on_cancel(reason: str) -> None:
                tg.start_soon(_cancel, session, run.run_id, reason)

            run.on_cancel(on_cancel)
            try:
                answer = await self._converse(run, session, endpoint)
            finally:
                with anyio.CancelScope(shield=True):
                    await to_child_w.aclose()  # the runtime's lifeline: the end of its input
                    observed.rung = "exit"
                    with anyio.move_on_after(cfg.dispose.eof):
                        await stopped.wait()
                tg.cancel_scope.cancel()
        await to_child_r.aclose()
        await to_parent_r.aclose()
        return answer

    async def _converse(
        self, run: SubagentRun, session: ChildSession, endpoint: Endpoint
    ) -> RunResult | None:
        cfg, observed = run.config, run.observed
        try:
            with anyio.fail_after(cfg.handshake_timeout):
                await session.initialize(
                    InitializeParams(
                        protocol_version=PROTOCOL_VERSION,
                        client_info=PeerInfo(name="tether-supervisor", version=version()),
                        capabilities=ClientCapabilities(),
                        max_message_bytes=cfg.max_message_bytes,
                    )
                )
        except TimeoutError:
            observed.handshake = cfg.handshake_timeout
            return None
        except (ConnectionClosed, RemoteError, RemoteProtocolError) as exc:
            observed.protocol_error = f"the in-process runtime refused initialize: {exc}"
            return None
        run.prompts = 1
        wall = run.limits.wall_seconds
        idle = run.limits.idle_seconds
        answer: RunResult | None = None
        with anyio.move_on_after(wall if wall is not None else math.inf) as clock:
            async with anyio.create_task_group() as tg:
                if idle is not None:
                    tg.start_soon(_watch_idle, endpoint, idle, observed, tg.cancel_scope)
                try:
                    answer = await session.run(run.params)
                except ConnectionClosed:
                    pass
                except RemoteError as exc:
                    observed.agent_error = f"the runtime refused the run: {exc.message}"
                except (RemoteProtocolError, LocalProtocolError) as exc:
                    observed.protocol_error = f"agent/run: {exc.message}"
                tg.cancel_scope.cancel()
        if clock.cancelled_caught and wall is not None and answer is None:
            observed.deadline = wall
        return answer


async def _cancel(session: ChildSession, run_id: str, reason: str) -> None:
    try:
        with anyio.move_on_after(0.5):
            await session.cancel(run_id, reason)
    except ConnectionClosed:
        pass


async def _watch_idle(
    endpoint: Endpoint, idle: float, observed: Observed, scope: anyio.CancelScope
) -> None:
    since = time.monotonic()
    while True:
        quiet = min(endpoint.quiet_for(), time.monotonic() - since)
        if quiet >= idle:
            observed.idle = idle
            scope.cancel()
            return
        await anyio.sleep(idle - quiet)


def _agent_spec(command: object) -> str | None:
    """A custom agent's spec (`--agent SPEC` that `Supervisor.start` appends), if any."""
    argv = list(command) if isinstance(command, (list, tuple)) else []
    if "--agent" in argv:
        i = argv.index("--agent")
        if i + 1 < len(argv):
            return str(argv[i + 1])
    return None


def _require_asyncio(name: str) -> None:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise ValueError(f"provider {name!r} runs on the asyncio backend only") from None


__all__ = ["InProcessProvider"]
