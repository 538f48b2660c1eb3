"""The verifier's verdict: parsed by the parent, and never a false PASS."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.delegation import parse_verdict
from tether.parent.run.evidence import verdicts

# The rule, `VERDICT:\s*(PASS|FAIL|PARTIAL)`, with the markdown emphasis the parser
# also accepts between the two words.
SPEC = re.compile(r"VERDICT:[\s*_`]*(PASS|FAIL|PARTIAL)", re.IGNORECASE)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("All good.\nVERDICT: PASS", "PASS"),
        ("1. broken\nVERDICT: FAIL\n", "FAIL"),
        ("VERDICT: PARTIAL", "PARTIAL"),
        ("verdict: pass", "PASS"),
        ("Verdict:fail", "FAIL"),
        ("VERDICT:\tPASS.", "PASS"),
        ("**VERDICT:** PASS", "PASS"),
        ("**VERDICT: PASS**", "PASS"),
        ("VERDICT: `FAIL`", "FAIL"),
    ],
)
def test_a_verdict_line_is_read_case_insensitively(text: str, verdict: str) -> None:
    assert parse_verdict(text) == verdict


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Looks fine to me.",
        "PASS",
        "VERDICT PASS",
        "VERDICT: PASSED",
        "VERDICT: PASS|FAIL|PARTIAL",
        "VERDICT: PASS/FAIL",
        "VERDICT: PASS-ish",
        "VERDICT: probably PASS",
        "VERDICT: ✓",
    ],
)
def test_a_missing_or_garbled_verdict_is_partial(text: str) -> None:
    assert parse_verdict(text) == "PARTIAL"


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("VERDICT: PASS\n...on second look:\nVERDICT: FAIL", "FAIL"),
        ("VERDICT: FAIL\nafter all\nVERDICT: PASS", "FAIL"),
        ("VERDICT: PASS\nVERDICT: PARTIAL", "PARTIAL"),
        ("VERDICT: PARTIAL\nVERDICT: PASS", "PARTIAL"),
        ("VERDICT: PASS\nVERDICT: pass", "PASS"),
    ],
)
def test_with_several_verdict_lines_the_most_severe_wins(text: str, verdict: str) -> None:
    assert parse_verdict(text) == verdict


pieces = st.sampled_from(
    [
        "VERDICT:",
        "verdict:",
        "PASS",
        "pass",
        "FAIL",
        "PARTIAL",
        "|",
        "/",
        " ",
        "\n",
        "*",
        "ED",
        "x",
        ":",
    ]
)
texts = st.lists(pieces | st.text(max_size=8), max_size=30).map("".join)


@given(texts)
def test_no_text_without_a_pass_verdict_line_parses_as_pass(text: str) -> None:
    if parse_verdict(text) == "PASS":
        assert any(m.group(1).upper() == "PASS" for m in SPEC.finditer(text))


@given(texts, texts)
def test_a_fail_verdict_anywhere_means_fail(before: str, after: str) -> None:
    assert parse_verdict(f"{before}\nVERDICT: FAIL\n{after}") == "FAIL"


@given(texts)
def test_pass_needs_every_verdict_line_to_say_pass(text: str) -> None:
    found = verdicts(text)
    assert (parse_verdict(text) == "PASS") == (bool(found) and set(found) == {"PASS"})
