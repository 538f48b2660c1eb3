"""The parent's typed session with one child: every parent → child method as a typed call.

No `Any` crosses this layer: each call sends a method constant from the one method table and
gets that method's result type back. Errors are the endpoint's (`RemoteError`,
`RemoteProtocolError`, `ConnectionClosed`, `LocalProtocolError`).
"""

from __future__ import annotations

from collections.abc import Callable

from tether.protocol import SUPPORTED_VERSIONS, RemoteProtocolError
from tether.protocol.messages import (
    AgentCancelParams,
    AgentMessageParams,
    AgentRunParams,
    Empty,
    InitializeParams,
    InitializeResult,
    RunResult,
)
from tether.protocol.methods import (
    AGENT_CANCEL,
    AGENT_MESSAGE,
    AGENT_RUN,
    EXIT,
    INITIALIZE,
    PING,
    SHUTDOWN,
)
from tether.wire import Endpoint


class ChildSession:
    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self.info: InitializeResult | None = None
        """What the child answered to `initialize`, once it has."""

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        """The handshake. Raises `RemoteProtocolError` when the child answers with a protocol
        version this parent does not speak; on success the child's announced read cap becomes
        the cap for every line sent to it."""
        got = await self._endpoint.request(INITIALIZE, params)
        if got.protocol_version not in SUPPORTED_VERSIONS:
            raise RemoteProtocolError(
                f"the child answered initialize with protocol version {got.protocol_version}; "
                f"this parent speaks {', '.join(map(str, SUPPORTED_VERSIONS))}"
            )
        self._endpoint.connection.peer_max_message_bytes = got.max_message_bytes
        self.info = got
        return got

    async def run(
        self, params: AgentRunParams, *, on_answer: Callable[[], None] | None = None
    ) -> RunResult:
        """`agent/run`; `on_answer()` runs the moment the answer is read, before anything the
        child sends after it is acted on."""
        return await self._endpoint.request(AGENT_RUN, params, on_answer=on_answer)

    async def message(
        self,
        params: AgentMessageParams,
        *,
        on_answer: Callable[[], None] | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> RunResult:
        """`agent/message`; `on_answer()` as for `run`, `on_sent()` once the request is
        written."""
        return await self._endpoint.request(
            AGENT_MESSAGE, params, on_answer=on_answer, on_sent=on_sent
        )

    async def cancel(self, run_id: str, reason: str = "") -> None:
        await self._endpoint.notify(AGENT_CANCEL, AgentCancelParams(run_id=run_id, reason=reason))

    async def ping(self) -> None:
        await self._endpoint.request(PING, Empty())

    async def shutdown(self) -> None:
        await self._endpoint.request(SHUTDOWN, None)

    async def exit(self) -> None:
        await self._endpoint.notify(EXIT)
