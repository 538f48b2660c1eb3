"""`initialize` is served without jsonrpcserver (its import is off the handshake's path), with
exactly the errors the jsonrpcserver path gives."""

from __future__ import annotations

from typing import Any

import pytest

from tether.child.dispatch import DIRECT, Dispatcher
from tether.child.errors import INTERNAL_MESSAGE
from tether.protocol import ErrorCode, WireError

pytestmark = pytest.mark.anyio


async def _refuse(params: Any) -> Any:
    raise WireError(ErrorCode.UNSUPPORTED_VERSION, "no such version", {"supportedVersions": [1]})


async def _crash(params: Any) -> Any:
    raise RuntimeError("secret detail that must not reach the wire")


@pytest.mark.parametrize("handler", [_refuse, _crash])
async def test_a_direct_method_fails_exactly_as_the_same_handler_through_jsonrpcserver(
    handler: Any,
) -> None:
    assert "initialize" in DIRECT
    direct = Dispatcher({"initialize": handler})
    through = Dispatcher({"other": handler})
    with pytest.raises(WireError) as by_direct:
        await direct.request("initialize", None)
    with pytest.raises(WireError) as by_jsonrpcserver:
        await through.request("other", None)
    got, want = by_direct.value, by_jsonrpcserver.value
    assert (got.code, got.message, got.data) == (want.code, want.message, want.data)
    if handler is _crash:
        assert got.message == INTERNAL_MESSAGE
