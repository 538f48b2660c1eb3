"""The trampoline's configuration word: what the parent encodes is what the trampoline reads,
and the trampoline imports nothing a bare interpreter does not already have but its own."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.contain import argv as config_word
from tether.contain.inplace import TRAMPOLINE

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), _json, max_size=6))
def test_any_json_shaped_configuration_comes_back_as_it_went(config: dict[str, object]) -> None:
    assert config_word.decode(config_word.encode(config)) == config


def test_a_json_word_is_still_read_for_people_who_run_the_trampoline_by_hand() -> None:
    assert config_word.decode('{"ppid": 1, "plan": null}') == {"ppid": 1, "plan": None}


@pytest.mark.parametrize("word", ["zz", "", "00", "5b5d"])  # not hex, empty, junk, a list
def test_a_word_that_is_not_a_configuration_is_refused(word: str) -> None:
    with pytest.raises(ValueError):
        config_word.decode(word)


def test_the_trampoline_imports_neither_json_nor_signal_nor_re_on_its_way_to_exec() -> None:
    # `-X importtime` lists every module the trampoline imported before it exec'd `true`.
    got = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-I",
            "-S",
            str(TRAMPOLINE),
            config_word.encode({"rlimits": {}, "cgroup_procs": []}),
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert got.returncode == 0, got.stderr
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in got.stderr.splitlines()
        if line.startswith("import time:") and "[us]" not in line
    }
    assert "tether.contain.sequence" in imported, got.stderr
    assert imported.isdisjoint({"json", "re", "enum", "signal", "site", "typing"}), sorted(imported)
