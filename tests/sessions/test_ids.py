"""Agent ids: minted unguessable, and anything a model passes that is not one is refused."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.agents.sessions import BadAgentId, is_agent_id, new_agent_id, parse_agent_id

ID = re.compile(r"ag_[0-9a-f]{20}")


def test_minted_ids_have_the_format_and_do_not_repeat() -> None:
    ids = [new_agent_id() for _ in range(10_000)]
    assert all(ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


@given(st.text(max_size=200))
def test_text_is_an_id_exactly_when_it_has_the_format(text: str) -> None:
    if ID.fullmatch(text.strip()):
        assert parse_agent_id(text) == text.strip()
    else:
        with pytest.raises(BadAgentId) as err:
            parse_agent_id(text)
        # The message quotes at most a short prefix of what came in: safe to hand back.
        assert len(str(err.value)) < 200
    assert is_agent_id(text) == bool(ID.fullmatch(text))


def test_a_huge_or_odd_value_is_refused_briefly() -> None:
    for raw in ["x" * 1_000_000, b"ag_" + b"0" * 20, ["ag_" + "0" * 20], {"id": 1}]:
        with pytest.raises(BadAgentId) as err:
            parse_agent_id(raw)
        assert len(str(err.value)) < 200
