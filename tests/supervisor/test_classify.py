"""`classify` and `failure_of`, pure: what the supervisor saw → one failure kind, in priority
order (what the supervisor itself decided explains a death better than the signal it used)."""

from __future__ import annotations

import signal

import pytest

from tether.parent.process.classify import Observed, classify, failure_of, signal_name
from tether.parent.process.limits import Limits

SIGKILL = int(signal.SIGKILL)
SIGTERM = int(signal.SIGTERM)


def kind(o: Observed) -> str | None:
    got = classify(o)
    return got[0] if got else None


def test_an_answered_run_that_then_exited_cleanly_is_no_failure() -> None:
    assert classify(Observed(answered=True, exit_code=0, rung="shutdown")) is None
    assert failure_of(Observed(answered=True, exit_code=0)) is None


def test_an_answered_run_stands_whatever_happened_to_the_child_after() -> None:
    assert classify(Observed(answered=True, exit_code=1)) is None
    assert classify(Observed(answered=True, signal=SIGKILL, rung="sigkill")) is None
    assert classify(Observed(answered=True, signal=int(signal.SIGSEGV))) is None


def test_spawn_failure_wins_over_everything() -> None:
    o = Observed(spawn_error="cannot start 'x'", cancelled=True, exit_code=127, truncated=True)
    assert classify(o) == ("spawn_failed", "cannot start 'x'")


def test_a_cancel_explains_the_signal_used_to_carry_it_out() -> None:
    o = Observed(cancelled=True, signal=SIGKILL, rung="sigkill", protocol_error="garbage")
    assert kind(o) == "cancelled"


def test_oversize_comes_before_other_protocol_faults() -> None:
    assert kind(Observed(oversize="line over 1000000 bytes", protocol_error="x")) == "oversize"


def test_a_protocol_fault_explains_the_exit_that_followed() -> None:
    assert kind(Observed(protocol_error="not JSON", exit_code=1)) == "protocol"


def test_a_deadline_explains_the_kill_that_enforced_it() -> None:
    o = Observed(deadline=0.5, signal=SIGKILL, rung="sigkill")
    assert classify(o) == ("timeout", "the run passed its wall-clock limit of 0.5s")
    failure = failure_of(o)
    assert failure is not None
    assert failure.limit == "wall=0.5s"
    assert failure.signal == "SIGKILL"
    assert failure.rung == "sigkill"


def test_idle_and_handshake_timeouts_are_unresponsive_with_the_limit_named() -> None:
    idle = failure_of(Observed(idle=20.0, rung="exit"))
    handshake = failure_of(Observed(handshake=10.0, rung="sigterm", signal=SIGTERM))
    assert idle is not None and handshake is not None
    assert (idle.kind, idle.limit) == ("unresponsive", "idle=20s")
    assert (handshake.kind, handshake.limit) == ("unresponsive", "handshake=10s")


def test_a_refused_run_is_an_agent_error() -> None:
    assert classify(Observed(answered=True, agent_error="refused")) == ("agent_error", "refused")


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGSYS"])
def test_a_child_that_dies_by_a_crash_signal_crashed(sig: str) -> None:
    o = Observed(signal=int(getattr(signal, sig)), rung="none")
    assert classify(o) == ("crashed", f"the child crashed ({sig})")
    failure = failure_of(o)
    assert failure is not None
    assert failure.signal == sig
    assert failure.exit_code is None


def test_sigabrt_is_never_reported_as_exit_0() -> None:
    failure = failure_of(Observed(signal=int(signal.SIGABRT), rung="exit"))
    assert failure is not None
    assert (failure.kind, failure.signal, failure.exit_code) == ("crashed", "SIGABRT", None)


def test_a_signal_from_outside_that_is_not_a_crash_is_killed() -> None:
    assert classify(Observed(signal=SIGTERM, rung="none")) == (
        "killed",
        "the child was killed by SIGTERM",
    )
    assert kind(Observed(signal=SIGKILL, rung="exit")) == "killed"


def test_a_sigkill_is_a_cpu_limit_only_when_the_child_used_up_its_cpu_time() -> None:
    # RLIMIT_CPU ends in SIGKILL at the hard limit; an operator's or the OOM killer's does not.
    spent = Observed(signal=SIGKILL, rung="none", limits=Limits(cpu="2s"), cpu_seconds=3.01)
    fresh = Observed(signal=SIGKILL, rung="none", limits=Limits(cpu="2s"), cpu_seconds=0.05)
    assert kind(spent) == "cpu_limit"
    assert kind(fresh) == "killed"
    assert kind(Observed(signal=int(signal.SIGXCPU), limits=Limits(cpu="2s"))) == "cpu_limit"


def test_a_signal_the_ladder_sent_is_not_blamed_on_the_child() -> None:
    # Nothing else went wrong, yet it needed SIGTERM: it left without answering.
    assert classify(Observed(signal=SIGTERM, rung="sigterm")) == (
        "protocol",
        "the child died (SIGTERM) without answering the run",
    )


def test_a_nonzero_exit_before_answering_is_exit_nonzero() -> None:
    failure = failure_of(Observed(exit_code=3, stderr_tail="boom\n"))
    assert failure is not None
    assert (failure.kind, failure.exit_code, failure.stderr_tail) == ("exit_nonzero", 3, "boom\n")


def test_exit_0_without_answering_is_a_protocol_failure() -> None:
    assert classify(Observed(exit_code=0)) == (
        "protocol",
        "the child exited with status 0 without answering the run",
    )


def test_output_that_ends_mid_message_is_a_truncated_protocol_failure() -> None:
    assert classify(Observed(exit_code=0, truncated=True)) == (
        "protocol",
        "the child's output ended in the middle of a message",
    )


def test_a_child_that_closed_its_output_and_was_never_reaped_is_still_a_failure() -> None:
    assert classify(Observed()) == (
        "protocol",
        "the child closed its output without answering the run",
    )


def test_signal_names() -> None:
    assert signal_name(int(signal.SIGSEGV)) == "SIGSEGV"
    assert signal_name(99) == "signal 99"
