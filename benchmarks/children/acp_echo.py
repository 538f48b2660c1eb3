"""A minimal ACP echo agent on the `agent-client-protocol` package: the in-run reference of
the follow-up round trip. Each `session/prompt` says its text back as one
`agent_message_chunk` and ends the turn (`end_turn`); nothing else.

Run as `python -I acp_echo.py`; driven by the package's own client (`benchmarks/acp_peer.py`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import acp
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
)


class Echo:
    def __init__(self) -> None:
        self.conn: Any = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=protocol_version,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="acp-echo", version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id="echo-1")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        chunk = AgentMessageChunk(
            session_update="agent_message_chunk", content=acp.text_block(text)
        )
        await self.conn.session_update(session_id, chunk)
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    agent: Any = Echo()  # the package's `Agent` protocol, in the part a prompt uses
    asyncio.run(acp.run_agent(agent))
