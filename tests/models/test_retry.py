"""The retry arithmetic and the header parsing the HTTP providers share."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from tether.parent.models._http import display_url, parse_retry_after, redact
from tether.parent.models.retry import RetryPolicy


def test_backoff_doubles_up_to_the_cap_and_jitter_only_shortens_it() -> None:
    policy = RetryPolicy(initial_delay=0.5, max_delay=8.0, jitter=0.25)
    for retry, full in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        for _ in range(50):
            assert full * 0.75 <= policy.backoff(retry) <= full


def test_retry_after_is_read_in_seconds_milliseconds_or_as_an_http_date() -> None:
    assert parse_retry_after(httpx.Headers({"Retry-After": "0"})) == 0.0
    assert parse_retry_after(httpx.Headers({"Retry-After": "2.5"})) == 2.5
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "150", "Retry-After": "9"})) == 0.15
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    got = parse_retry_after(httpx.Headers({"Retry-After": date}))
    assert got is not None and 25 <= got <= 31
    assert parse_retry_after(httpx.Headers({"Retry-After": "soon"})) is None
    assert parse_retry_after(httpx.Headers()) is None


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"jitter": 2.0}, {"initial_delay": -1.0}])
def test_a_nonsensical_retry_policy_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**bad)  # type: ignore[arg-type]


def test_urls_in_messages_lose_their_user_info_and_query_and_keys_are_redacted() -> None:
    assert display_url("https://user:pw@host:8443/v1/x?key=s#f") == "https://host:8443/v1/x"
    assert (
        redact("bad key sk-1 and sk-1 again", ("sk-1", ""))
        == "bad key [redacted] and [redacted] again"
    )
