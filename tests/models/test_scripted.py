"""One scripted model for several agents: a script is chosen per run by its `when` pattern."""

from __future__ import annotations

import json

import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.protocol import RemoteError
from tether.protocol.messages import ChatMessage, ModelCompleteParams

pytestmark = pytest.mark.anyio

BOOK = json.dumps(
    {
        "scripts": [
            {"when": "You are an orchestrator", "turns": [{"text": "orchestrating"}]},
            {"when": "Role: verifier(?s:.*)guard added", "turns": [{"text": "VERDICT: PASS"}]},
            {"when": "Role: verifier", "turns": [{"text": "VERDICT: FAIL"}]},
        ]
    }
)


def _turn(run_id: str, system: str, task: str = "go") -> ModelCompleteParams:
    return ModelCompleteParams(
        run_id=run_id,
        messages=[
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=task),
        ],
    )


async def test_each_run_takes_the_first_script_whose_pattern_its_first_request_holds() -> None:
    model = ScriptedModel.from_json(BOOK)
    orchestrator = await model.complete(_turn("r1", "You are an orchestrator."))
    first_check = await model.complete(_turn("r2", "Role: verifier.", "author: wrote tests"))
    second_check = await model.complete(_turn("r3", "Role: verifier.", "author: guard added"))
    assert orchestrator.message.content == "orchestrating"
    assert first_check.message.content == "VERDICT: FAIL"
    assert second_check.message.content == "VERDICT: PASS"


async def test_a_run_keeps_its_script_and_one_no_script_matches_gets_a_model_error() -> None:
    model = ScriptedModel.from_json(
        json.dumps({"scripts": [{"when": "alpha", "turns": [{"text": "a1"}, {"text": "a2"}]}]})
    )
    assert (await model.complete(_turn("r1", "alpha"))).message.content == "a1"
    # The second turn's request no longer says "alpha": the run keeps the script it took.
    assert (await model.complete(_turn("r1", "something else"))).message.content == "a2"
    with pytest.raises(RemoteError, match="no script for this run"):
        await model.complete(_turn("r2", "beta"))


def test_a_bad_pattern_is_refused_when_the_script_is_read() -> None:
    with pytest.raises(ValueError, match="`when` pattern"):
        ScriptedModel.from_json(json.dumps({"scripts": [{"when": "(", "turns": []}]}))
