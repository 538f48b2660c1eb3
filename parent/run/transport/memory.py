"""The `memory` transport: tether's own child runtime as a task of the run, over in-memory
streams — no process, so no keeper, no containment, and no process isolation at all.

For tests (the supervisor tier that runs without processes) and for trusted, latency-critical
work: the `inprocess` provider runs on it. The run is the same conversation a child process has
(`initialize`, `agent/run` and `agent/message`, `model/complete` and `tool/approve` through the
run's broker, events, `agent/cancel`, `shutdown`), with the child runtime
(`tether.child.server.serve_streams`, wired by `tether.wire.in_memory.serve_in_memory`) on the
far end; so budgets, approvals, explore mode, the workspace confinement of the tools, the
handshake timeout and the wall and idle clocks hold as they do for a process. What does not:
the environment scrub, limits on memory, CPU, processes and files, the containment tier and the
sandbox. The tools run with the supervisor's own privileges; `bash` commands get the scrubbed
environment a child would have (never the supervisor's keys), run in their own process group
and are killed when they end or time out, but they are the supervisor's children. Every result
says so: `isolation.level` is `none`, with a warning.

Taking it down: `shutdown` (a ready child the run did not cut off), then the end of its input
(its lifeline, the `exit` rung), then — if it has not returned within the config's EOF grace —
its task is cancelled, which in memory always works. Between a continuable run's activations
nothing is held still: there is no process to freeze, and the run's broker serves nothing then.

This is the one module of the parent that imports `tether.child` (lazily, when a child is
opened): the exception to "parent never imports child" that
tests/protocol/test_import_discipline.py names. It runs on the asyncio backend only (the
runtime's tools use asyncio).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Self

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from tether.parent.process.classify import Observed
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.parent.process.isolation import Choice
from tether.parent.process.launchers import Local, resolve_launcher
from tether.parent.process.proc import SpawnError
from tether.parent.process.spawn import child_env
from tether.parent.process.wired import WiredChild
from tether.parent.run.transport.base import ChildRequest, ObtainedChild, ProcessHost
from tether.wire.in_memory import InMemoryPeer, serve_in_memory

log = logging.getLogger("tether.parent")

WARNING = (
    "the run was served inside the supervisor's own process (the in-memory transport): no "
    "process isolation, no sandbox, no limits on memory, CPU, processes or files; its tools "
    "ran with the supervisor's privileges"
)
ARGV = ("<in-process>",)
"""The command a `RunStarted` of an in-memory child names."""

Serve = Callable[[ByteReceiveStream, ByteSendStream], Awaitable[int]]


class InMemory:
    """The `memory` transport (see the module docstring)."""

    name = "memory"

    def check(self, config: ChildConfig) -> None:
        command = tuple(config.command)
        if command != DEFAULT_COMMAND and agent_spec(command) is None:
            raise ValueError(
                "the in-memory transport runs tether's own child runtime; it cannot run "
                f"{' '.join(command)!r} (a command runs as a process: transport='process')"
            )
        if not isinstance(resolve_launcher(config.launcher), Local):
            raise ValueError("the in-memory transport starts no process: it takes no launcher")
        if config.spawner == "zygote":
            raise ValueError("the in-memory transport starts no process: spawner='zygote' forks")

    def isolation(self, config: ChildConfig, remote_launcher: str | None) -> Choice:
        if config.isolation != "auto":
            raise ValueError(
                "the in-memory transport runs the child in the supervisor's own process, "
                f"without isolation; it cannot give isolation={config.isolation!r} (leave it "
                "'auto')"
            )
        return Choice("none", WARNING)

    @asynccontextmanager
    async def open(self, request: ChildRequest, host: ProcessHost) -> AsyncIterator[ObtainedChild]:
        cfg = request.config
        if request.network is not None:
            raise SpawnError("a child in memory cannot be handed a network listener")
        if request.layer is not None:
            # The plan gives a child in memory a copied layer, never an overlay to mount.
            raise SpawnError("a child in memory cannot mount an overlay")
        observed = Observed(limits=request.limits)
        serve = _runtime(cfg, observed)
        # No grace of the helper's own: the child's dispose has waited the EOF grace already.
        async with (
            serve_in_memory(serve, grace=0) as peer,
            MemoryChild(peer, observed, cfg) as child,
        ):
            yield ObtainedChild(child, None, os.getpid(), ARGV, "memory", contained=False)


def _runtime(cfg: ChildConfig, observed: Observed) -> Serve:
    """tether's child runtime, ready to serve a byte-stream pair: its tools (`bash` with the
    environment a child of `cfg` would have) and a custom agent's factory (`--agent SPEC`).
    Raises `SpawnError` when it cannot be made, as a child that cannot start."""
    _require_asyncio()
    from tether.child.agent_spec import load_agent_factory
    from tether.child.server import serve_streams
    from tether.child.tools import ToolRegistry, default_tools
    from tether.child.tools.bash import BashTool

    env = child_env(cfg)
    tools = ToolRegistry(
        BashTool(env=env) if tool.name == "bash" else tool for tool in default_tools()
    )
    factory = None
    spec = agent_spec(cfg.command)
    if spec is not None:
        try:
            factory = load_agent_factory(spec)
        except Exception as exc:  # the agent's module runs its own code when it is loaded
            raise SpawnError(f"cannot load the agent {spec!r}: {exc}") from exc

    async def serve(receive: ByteReceiveStream, send: ByteSendStream) -> int:
        try:
            return await serve_streams(receive, send, tools=tools, agent_factory=factory)
        except Exception as exc:  # the runtime failed: a child that crashed, not the parent
            log.error("the in-memory child runtime failed", exc_info=exc)
            observed.stderr_tail = f"{type(exc).__name__}: {exc}"[-2000:]
            return 1

    return serve


class MemoryChild(WiredChild):
    """An in-memory child as its run drives it: the parent's endpoint over the peer's streams;
    its context runs the reader and, on leaving, takes the runtime down (see the module
    docstring)."""

    def __init__(self, peer: InMemoryPeer[int], observed: Observed, config: ChildConfig) -> None:
        self.observed = observed
        self.held: str | None = None
        """Never held: there is no process to hold (see the module docstring)."""
        self.on_judged: Callable[[], Awaitable[None]] | None = None
        """Never called: the runtime's end is its result's (see `ChildLink`)."""
        self._peer = peer
        self._config = config
        self._tg: anyio.abc.TaskGroup | None = None
        self._wire(peer.receive, peer.send, max_message_bytes=config.max_message_bytes)

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._read)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        tg, self._tg = self._tg, None
        try:
            await self.dispose()
        finally:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
        return None

    async def dispose(self) -> None:
        """`shutdown`, then the end of its input; what is left is cancelled by the peer's
        context. Shielded, bounded by the config's shutdown and EOF graces."""
        policy = self._config.dispose
        observed = self.observed
        with anyio.CancelScope(shield=True):
            if not self.exited() and self._polite:
                observed.rung = "shutdown"
                with anyio.move_on_after(policy.shutdown):
                    await self._say_goodbye()
                    await self._peer.close_input()
                    await self._peer.stopped.wait()
            if not self.exited():
                observed.rung = "exit"
                with anyio.move_on_after(min(0.05, policy.eof)):
                    await self._say_exit()
                await self._peer.close_input()
                with anyio.move_on_after(policy.eof):
                    await self._peer.stopped.wait()
        if self.exited():
            observed.exit_code = self._peer.result

    def exited(self) -> bool:
        return self._peer.stopped.is_set()

    def stop_soon(self) -> None:
        return None

    async def hold_still(self) -> str:
        return "none"

    def resume(self) -> None:
        return None

    def spawn_failure(self) -> str | None:
        return None


def agent_spec(command: object) -> str | None:
    """A custom agent's spec: the `--agent SPEC` the plan appends to tether's own command."""
    argv = [str(word) for word in command] if isinstance(command, list | tuple) else []
    n = len(DEFAULT_COMMAND)
    if tuple(argv[:n]) == DEFAULT_COMMAND and len(argv) == n + 2 and argv[n] == "--agent":
        return argv[n + 1]
    return None


def _require_asyncio() -> None:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise SpawnError("the in-memory transport runs on the asyncio backend only") from None
