"""Providers: the named ways a supervisor runs a sub-agent (`sup.providers`), and the parts the
foreign-agent ones are built from. Importing this package loads neither the ACP package nor
the child runtime; each is imported when a run needs it.

- `base`: `Provider` (subclass it to write your own), `ProviderRegistry`, `SubagentRequest`
  (what a provider prepares), `SubagentRun` (what a provider that drives its own run gets);
- `builtin`: `spawn`, `fork`, `command`, and the registry every supervisor starts with;
- `inprocess`: tether's loop served inside the parent's own process (no process isolation);
- `acp_provider`: an Agent Client Protocol agent spawned through the spawn seam, its model
  calls brokered through the gateway; `acp` (`AcpDriver`), `acp_mapping`, `acp_transport`:
  driving one over its stdin/stdout; `confined_fs`: its file reads and writes, confined to
  the workspace;
- `tables`: `[[provider]]` tables of a definitions file.

See docs/providers.md and docs/acp.md.
"""
