"""The child's session state and the handlers of every parent → child method.

Theory of operation
-------------------
`python -I -m tether.child` first moves the wire to private fds (`fdguard`), then `server.serve`
runs one event loop with three kinds of work:

* the reader: the wire's `Endpoint` pumps bytes from the parent through the sans-I/O
  `Connection` (framing, byte cap, envelope and typed params). Replies to the child's own
  requests (`model/complete`, `tool/approve`) go back to the run that waits for them; malformed
  lines and stream faults are answered by the endpoint itself, which serves on; requests and
  notifications go to `dispatch.Dispatcher`, which calls the handlers below through
  jsonrpcserver.
* short requests (initialize, ping, shutdown, anything unknown) and every notification are
  handled inline by the reader, one after another, so they take effect in the order sent:
  `exit` after `shutdown` sees the shutdown, a request right after `initialize` sees it done.
* long requests (`agent/run`) are not served inline, because their response is the run's
  result and arrives only when the run ends; meanwhile the reader must keep serving
  `agent/cancel`, `ping`... The endpoint is `eager`: a run starts in the reader's task (its
  set-up, its `started` event), and the first time it waits (a model turn) the reading moves
  to a fresh task while the run keeps the one it started in; a run that never waits costs no
  task at all.

The state lives here, in `Session`, and moves one way:

    new --initialize--> ready --shutdown--> shutting down --exit / EOF--> stopped

Before `initialize` every request but `initialize` gets NOT_INITIALIZED; after it a second one
gets ALREADY_INITIALIZED. `shutdown` cancels live runs (their `agent/run` answers `aborted`),
answers `null`, and from then on new runs get SHUTTING_DOWN. `exit` stops the child with status
0 after a shutdown, 1 without one (as in LSP); EOF on the wire stops it with status 0, wrong
framing with status 2. Stopping cancels everything still running; `server` also arms a
backstop that ends the process within a second even if something refuses to unwind.

Runs live in `runs.RunTable`; what a run sees is `agent.AgentContext`; the built-in agent is
`loop.AgentLoop` unless `--agent` / `TETHER_AGENT` names another (`agent_spec.py`); its tools
come from `tools.default_tools()`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from tether._about import __version__
from tether.child import dispatch
from tether.child.errors import not_initialized
from tether.protocol import PROTOCOL_VERSION, SUPPORTED_VERSIONS, ErrorCode, WireError
from tether.protocol.messages import (
    HEARTBEAT_SECONDS,
    AgentCancelParams,
    AgentMessageParams,
    AgentRunParams,
    Empty,
    InitializeParams,
    InitializeResult,
    PeerInfo,
    RunResult,
    ServerCapabilities,
    UnsupportedVersionData,
)

if TYPE_CHECKING:
    # The agent machinery (runs, agent, loop, tools, workspace) is not needed to answer
    # `initialize`: it loads in the background once that answer is out, or at the first run.
    from tether.child.runs import AgentFactory, RunTable
    from tether.child.tools import ToolRegistry
    from tether.wire import Endpoint

log = logging.getLogger("tether.child")

Handler = Callable[[Any], Awaitable[Any]]

SERVER_NAME = "tether-child"
SERVER_VERSION = __version__
"""tether's version (`tether._about`)."""
EXIT_OK = 0
EXIT_WITHOUT_SHUTDOWN = 1
EXIT_PROTOCOL = 2

SHUTDOWN_GRACE_SECONDS = 5.0
"""How long `shutdown` waits for cancelled runs to answer before it answers itself."""
LONG_RUNNING = frozenset({"agent/run", "agent/message"})
"""Methods whose response waits for a run: never inline, so the reader keeps serving."""
_BEFORE_INITIALIZE = frozenset({"initialize", "exit"})
DEFAULT_TOOL_NAMES = (
    "read_file",
    "list_dir",
    "glob",
    "grep",
    "write_file",
    "edit_file",
    "bash",
    "complete",
    "report",
    "ask_orchestrator",
)
"""`tools.default_tools().names()`, known without importing the tools (a test keeps them equal)."""
AGENT_MODULES = ("tether.child.runs",)
"""What the first run needs and `initialize` does not: loaded by `warm_up()`."""


class Session:
    def __init__(
        self,
        tools: ToolRegistry | None = None,
        *,
        agent_factory: AgentFactory | None = None,
    ) -> None:
        """`tools`: `None` for the default set, built (with the run table) at the first run."""
        self._endpoint: Endpoint | None = None
        self._tools = tools
        self._agent_factory = agent_factory
        self._runs: RunTable | None = None
        self._parent_capabilities: Any = None
        self.initialized = False
        self.shutting_down = False
        self.exit_code: int | None = None
        """Set once the child must stop; `stopped` fires at the same moment."""
        self.stopped = anyio.Event()
        self.tasks: anyio.abc.TaskGroup | None = None
        """The server's task group: the runs' heartbeat task is started in it (`runs`)."""

    def attach(self, endpoint: Endpoint) -> None:
        """The wire this session answers on, and asks the parent through."""
        self._endpoint = endpoint

    def answered(self, method: str) -> None:
        """Called once the answer to `method` is on the wire."""
        if method == "initialize" and self.initialized:
            self.warm_up()

    @property
    def runs(self) -> RunTable:
        """The run table, created (and the agent machinery imported) on first use."""
        if self._runs is None:
            from tether.child.heartbeats import Heartbeats
            from tether.child.runs import RunTable, default_agent
            from tether.child.tools import default_tools

            tools = self._tools if self._tools is not None else default_tools()
            self._tools = tools
            assert self._endpoint is not None
            beats = None
            if self.tasks is not None:
                beats = Heartbeats(HEARTBEAT_SECONDS)
                self.tasks.start_soon(beats.run)
            self._runs = RunTable(
                self._endpoint,
                tools,
                agent_factory=self._agent_factory or default_agent,
                beats=beats,
            )
            if self._parent_capabilities is not None:
                self._runs.parent_capabilities = self._parent_capabilities
        return self._runs

    def warm_up(self) -> None:
        """Import jsonrpcserver's dispatcher and the agent machinery in a background thread
        (after `initialize` is answered, so the handshake never waits for them and the first
        request or run rarely does). A child forked from the zygote has both already: no thread
        then, whose start alone (≈ 0.2 ms) would sit between the handshake and reading the
        `agent/run` right behind it."""
        if dispatch.preloaded() and (
            self._runs is not None or all(name in sys.modules for name in AGENT_MODULES)
        ):
            return

        def load() -> None:
            dispatch.preload()
            if self._runs is None:
                for name in AGENT_MODULES:
                    importlib.import_module(name)

        threading.Thread(target=load, name="tether-warm-up", daemon=True).start()

    @property
    def settled(self) -> bool:
        """Stopped after a completed `shutdown`, every run answered: nothing the process could
        still do is of use to the parent, so it may end without unwinding (`server.serve`)."""
        return (
            self.exit_code == EXIT_OK
            and self.shutting_down
            and (self._runs is None or self._runs.live == 0)
        )

    def stop(self, code: int) -> None:
        if self.exit_code is None:
            self.exit_code = code
            self.stopped.set()

    def gate(self, method: str) -> None:
        """Refuse what the lifecycle does not allow yet (raises `WireError`)."""
        if not self.initialized and method not in _BEFORE_INITIALIZE:
            raise not_initialized(method)

    def handlers(self) -> dict[str, Handler]:
        return {
            "initialize": self.initialize,
            "ping": self.ping,
            "shutdown": self.shutdown,
            "exit": self.exit,
            "agent/run": self.agent_run,
            "agent/message": self.agent_message,
            "agent/cancel": self.agent_cancel,
        }

    # --- lifecycle --------------------------------------------------------------------------

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        if self.initialized:
            raise WireError(ErrorCode.ALREADY_INITIALIZED, "already initialized")
        if params.protocol_version not in SUPPORTED_VERSIONS:
            raise WireError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"protocol version {params.protocol_version} is not supported; this child "
                f"speaks {', '.join(map(str, SUPPORTED_VERSIONS))}",
                UnsupportedVersionData(supported_versions=list(SUPPORTED_VERSIONS)),
            )
        if params.max_message_bytes < 1:
            raise WireError(ErrorCode.INVALID_PARAMS, "maxMessageBytes must be positive")
        assert self._endpoint is not None
        self._endpoint.connection.peer_max_message_bytes = params.max_message_bytes
        self._parent_capabilities = params.capabilities
        if self._runs is not None:
            self._runs.parent_capabilities = params.capabilities
        self.initialized = True
        return InitializeResult(
            protocol_version=PROTOCOL_VERSION,
            server_info=PeerInfo(name=SERVER_NAME, version=SERVER_VERSION),
            pid=os.getpid(),
            capabilities=ServerCapabilities(
                agent_run=True,
                agent_message=True,
                parent_tools=True,
                tools=self._tools.names() if self._tools is not None else list(DEFAULT_TOOL_NAMES),
            ),
        )

    async def ping(self, params: Empty) -> Empty:
        return Empty()

    async def shutdown(self, params: None) -> None:
        self.shutting_down = True
        # Bounded: shutdown is handled inline by the reader, and a run that will not unwind
        # (a tool stuck in a syscall) must not keep the reader from seeing `exit` or EOF.
        if self._runs is None:
            return  # no run ever started
        with anyio.move_on_after(SHUTDOWN_GRACE_SECONDS) as waited:
            await self._runs.cancel_all("the child is shutting down")
        if waited.cancelled_caught:
            log.warning("answering shutdown while runs are still unwinding")

    async def exit(self, params: None) -> None:
        self.stop(EXIT_OK if self.shutting_down else EXIT_WITHOUT_SHUTDOWN)

    # --- runs -------------------------------------------------------------------------------

    def _refuse_if_shutting_down(self) -> None:
        if self.shutting_down:
            raise WireError(ErrorCode.SHUTTING_DOWN, "the child is shutting down: no new runs")

    async def agent_run(self, params: AgentRunParams) -> RunResult:
        self._refuse_if_shutting_down()
        return await self.runs.run(params)

    async def agent_message(self, params: AgentMessageParams) -> RunResult:
        self._refuse_if_shutting_down()
        return await self.runs.message(params.run_id, params.message)

    async def agent_cancel(self, params: AgentCancelParams) -> None:
        # An unknown id is not an error: the run may have ended while the cancel was in flight.
        if self._runs is not None:
            self._runs.cancel(params.run_id, params.reason)
