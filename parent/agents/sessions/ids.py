"""Agent ids: minted here, and checked wherever one arrives from outside (a model, a CLI user).

An id is `ag_` and 20 lowercase hex digits: 80 random bits from the OS, so ids minted by any
number of processes on one database do not collide in practice (the insert is checked anyway)
and cannot be guessed from one another. The format is deliberately plain, so a model copies it
back intact, and strict, so a model-supplied string is either an id or refused before it
reaches a query.
"""

from __future__ import annotations

import re
import secrets

PREFIX = "ag_"
_HEX_DIGITS = 20
_ID = re.compile(rf"{PREFIX}[0-9a-f]{{{_HEX_DIGITS}}}")
_LONGEST_SHOWN = 60


class BadAgentId(ValueError):
    """The caller (often a model) passed something that is not an agent id.

    The message is safe to hand back to a model: it quotes at most a short, escaped prefix of
    what was passed.
    """


def new_agent_id() -> str:
    return PREFIX + secrets.token_hex(_HEX_DIGITS // 2)


def parse_agent_id(raw: object) -> str:
    """The agent id in `raw`, which may carry surrounding whitespace; `BadAgentId` otherwise."""
    if not isinstance(raw, str):
        raise BadAgentId(
            f"an agent id is a string like 'ag_{'0' * _HEX_DIGITS}', got {type(raw).__name__}"
        )
    text = raw.strip()
    if _ID.fullmatch(text):
        return text
    shown = repr(text[:_LONGEST_SHOWN])
    if len(shown) > _LONGEST_SHOWN or len(text) > _LONGEST_SHOWN:
        shown = shown[:_LONGEST_SHOWN] + "…"
    raise BadAgentId(
        f"not an agent id: {shown} (an id is 'ag_' and {_HEX_DIGITS} lowercase hex digits, "
        "as list_agents shows it)"
    )


def is_agent_id(raw: object) -> bool:
    return isinstance(raw, str) and _ID.fullmatch(raw) is not None
