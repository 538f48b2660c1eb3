"""The model gateway for foreign agents: Anthropic- and OpenAI-compatible endpoints that take a
per-child capability token in place of an API key and answer from the run's own provider, in
the parent. See `server.py` for how it works, `grants.py` for tokens and budgets, `http.py`
for what a client may hold of it."""

from tether.parent.gateway.grants import Grant, GrantTable, UsageCallback
from tether.parent.gateway.http import HttpLimits, Quota
from tether.parent.gateway.server import Gateway, GatewayLimits

__all__ = [
    "Gateway",
    "GatewayLimits",
    "Grant",
    "GrantTable",
    "HttpLimits",
    "Quota",
    "UsageCallback",
]
