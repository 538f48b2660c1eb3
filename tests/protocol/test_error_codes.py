"""Every `ErrorCode` value is part of the wire contract with other languages: pin each one."""

from __future__ import annotations

import pytest

from tether.protocol import ErrorCode

PINNED: dict[str, int] = {
    # JSON-RPC 2.0
    "PARSE_ERROR": -32700,
    "INVALID_REQUEST": -32600,
    "METHOD_NOT_FOUND": -32601,
    "INVALID_PARAMS": -32602,
    "INTERNAL_ERROR": -32603,
    # tether's application band
    "NOT_INITIALIZED": -32000,
    "ALREADY_INITIALIZED": -32001,
    "UNSUPPORTED_VERSION": -32002,
    "UNKNOWN_RUN": -32003,
    "RUN_BUSY": -32004,
    "SHUTTING_DOWN": -32005,
    "MESSAGE_TOO_LARGE": -32006,
    "WRONG_FRAMING": -32007,
    "NO_MODEL": -32008,
    "MODEL_ERROR": -32009,
    "CONNECTION_CLOSED": -32010,
    "REQUEST_TIMEOUT": -32011,
    "BUDGET_EXHAUSTED": -32012,
    "RUN_IDLE": -32013,
}


@pytest.mark.parametrize(("name", "value"), sorted(PINNED.items()))
def test_each_pinned_error_code_keeps_its_value(name: str, value: int) -> None:
    assert ErrorCode[name] == value
    assert int(ErrorCode[name]) == value


def test_every_error_code_member_is_pinned() -> None:
    assert {code.name: int(code) for code in ErrorCode} == PINNED


def test_error_code_values_are_unique() -> None:
    assert len(set(PINNED.values())) == len(PINNED)


def test_application_codes_stay_in_the_reserved_server_band() -> None:
    for code in ErrorCode:
        if code.name not in {
            "PARSE_ERROR",
            "INVALID_REQUEST",
            "METHOD_NOT_FOUND",
            "INVALID_PARAMS",
            "INTERNAL_ERROR",
        }:
            assert -32099 <= code <= -32000, code
