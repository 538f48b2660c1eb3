"""Limits as people write them: compound durations, sizes that carry their unit, errors that
name what was given, and the idle limit's relation to tether's heartbeats."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.config import DEFAULT_COMMAND
from tether.parent.process.limits import Limits, parse_duration, parse_size
from tether.parent.run.checks import idle_warning, limits_from_flags
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import HEARTBEAT_SECONDS

UNITS = (("h", 3600), ("m", 60), ("s", 1), ("ms", 0.001))
DONE = """[{"text": "Done.", "toolCalls": [{"name": "complete",
  "arguments": {"summary": "ok", "paths": []}}]}]"""


@given(
    st.lists(st.integers(min_value=0, max_value=999), min_size=4, max_size=4),
    st.lists(st.booleans(), min_size=4, max_size=4).filter(any),
    st.sampled_from(["", " "]),
)
def test_a_compound_duration_is_the_sum_of_its_parts(
    amounts: list[int], used: list[bool], gap: str
) -> None:
    parts = [
        (n, unit, size) for n, (unit, size), on in zip(amounts, UNITS, used, strict=True) if on
    ]
    text = gap.join(f"{n}{unit}" for n, unit, _ in parts)
    want = sum(n * size for n, _, size in parts)
    if want <= 0:
        with pytest.raises(ValueError, match="must be positive"):
            parse_duration(text, "x")
    else:
        assert parse_duration(text, "x") == pytest.approx(want)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m30s", 90), ("90", 90), ("1.5s", 1.5), ("500ms", 0.5), ("2h", 7200), ("1h 2m 3s", 3723)],
)
def test_durations_people_write_are_understood(text: str, seconds: float) -> None:
    assert parse_duration(text, "wall") == seconds


@pytest.mark.parametrize("text", ["30s1m", "1m1m", "1m30", "soon", "ms", "", "1d"])
def test_a_duration_out_of_order_repeated_or_without_a_unit_after_another_is_refused(
    text: str,
) -> None:
    with pytest.raises(ValueError, match="--timeout: expected a duration like '30s', '1m30s'"):
        parse_duration(text, "--timeout")


def test_a_size_string_without_a_unit_is_refused_and_an_int_is_bytes() -> None:
    with pytest.raises(ValueError, match="'512' has no unit; write 512M"):
        Limits(memory="512")
    with pytest.raises(ValueError, match="file_size: '100' has no unit"):
        Limits(file_size="100")
    assert parse_size("512B", "memory") == 512
    assert Limits(memory=512).memory == 512


def test_flag_errors_name_the_flag_not_the_field() -> None:
    for values, flag in (
        ({"wall": "soon"}, "--timeout"),
        ({"idle": "0s"}, "--idle-timeout"),
        ({"memory": "512"}, "--memory"),
        ({"processes": 0}, "--processes"),
        ({"open_files": 1 << 40}, "--open-files"),
        ({"file_size": "x"}, "--file-size"),
    ):
        with pytest.raises(ValueError) as err:
            limits_from_flags(values)
        assert str(err.value).startswith(f"{flag}: "), err.value
    assert limits_from_flags({"wall": "1m30s", "memory": "1G"}) == Limits(wall=90, memory="1G")


def test_the_idle_limit_is_judged_against_the_heartbeat_interval_for_tethers_own_child() -> None:
    own = DEFAULT_COMMAND
    least = 2 * HEARTBEAT_SECONDS
    assert idle_warning(own, Limits(idle=least)) is None
    assert idle_warning(own, Limits()) is None
    warned = idle_warning(own, Limits(idle=HEARTBEAT_SECONDS))
    assert warned is not None and f"at least {least:g}s" in warned
    # With a custom agent it is still tether's child, and still heartbeats.
    assert idle_warning((*own, "--agent", "a.py:f"), Limits(idle=1)) is not None
    # Another program chooses its own heartbeats (or none): nothing to judge.
    assert idle_warning(("node", "child.js"), Limits(idle=1)) is None


@pytest.mark.anyio
async def test_starting_tethers_child_with_a_tight_idle_limit_warns(tmp_path: Path) -> None:
    async with Supervisor() as sup:
        with pytest.warns(RuntimeWarning, match="idle limit 1s"):
            handle = await sup.start(
                "go", workspace=tmp_path, model=ScriptedModel.from_json(DONE), limits=Limits(idle=1)
            )
        assert (await handle.result()).success
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            handle = await sup.start(
                "go", workspace=tmp_path, model=ScriptedModel.from_json(DONE), limits=Limits(idle=5)
            )
        assert (await handle.result()).success
