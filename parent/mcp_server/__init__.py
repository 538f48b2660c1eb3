"""`tether mcp`: tether as an MCP server over stdio; any MCP client delegates to isolated
tether sub-agents through its `task` tool. See docs/mcp.md.

Theory of operation
-------------------
The server is one process: an MCP endpoint on its stdin/stdout (the official `mcp` SDK's
low-level `Server`, run over `stdio.py`'s transport) in front of one `Supervisor`. Each tool is
a `ServedTool` (`tools.py`): a name, a JSON Schema, and an async call that answers with an
`Answer` (a short text, structured content, whether it is an error). `task` is the delegation
layer's task tool (`task.py`): its schema comes from the definitions, a `Delegator` validates
and admits each call, and a `SupervisorRunner` runs every sub-agent as a supervised, sandboxed
child of this server, its model calls brokered here with the keys in this process's
environment. More tools plug in as `ServedTool`s too; `from_parent_tool` adapts any
`ParentTool`. With `--continuable` (`continuable.py`) the sub-agents are continuable agents and
the continuable children's `send_message` and `list_agents` are served that way.

A call runs as a task owned by the server (`server.py`), not by the SDK's request handler, so
whatever the handler's fate the call has an owner: when the client cancels the request (or
disconnects, or the server is told to stop), the handler cancels its call and waits, shielded
and bounded, until the call's sub-agents are disposed through the ladder, then lets the
cancellation go on. With a progress token on the request, each sub-agent's events reach the
client as `notifications/progress` (`progress.py`). Nothing a tool or a sub-agent does
becomes a protocol error: failures are tool results with `isError`.

Nothing but MCP is written to stdout: while serving, the process's fd 1 points at stderr and
fd 0 at /dev/null (the wire runs on private duplicates), and logs go to stderr.

Only `tether mcp` imports this package's SDK-bound modules (`server.py`, `stdio.py`,
`cli.serve`): the SDK is the optional extra `tether[mcp]`, and nothing else in tether needs it.
"""
