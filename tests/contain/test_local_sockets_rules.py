"""When a sandboxed child may `connect` to UNIX sockets (`Plan.local_sockets`): pure rules.
A plan asks; the sequence allows it only where the promise holds — abstract sockets scoped
(Landlock ABI 6) and pathname sockets either sealed by private mounts or resolved by Landlock
itself (ABI 9, `RESOLVE_UNIX`, granted with the write rights and never with the read ones);
a foreign agent's plan (the gateway variant) never. The parent asks where the host can."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.contain import landlock
from tether.contain.plan import Plan
from tether.contain.sequence import local_sockets
from tether.parent.process.isolation import HostIsolation, _local_sockets, plan_for


def test_resolve_unix_is_handled_from_abi_9_granted_with_writes_and_never_with_reads() -> None:
    assert not landlock.fs_rights(8) & landlock.RESOLVE_UNIX
    assert landlock.fs_rights(9) & landlock.RESOLVE_UNIX
    assert landlock.WRITE & landlock.RESOLVE_UNIX
    assert not landlock.READ & landlock.RESOLVE_UNIX
    assert not landlock.FILE_RIGHTS & landlock.RESOLVE_UNIX


@pytest.mark.parametrize(
    ("abi", "private_mounts", "network", "allowed"),
    [
        (7, True, None, True),  # sealed mounts, abstract scope
        (5, True, None, False),  # no abstract scope
        (7, False, None, False),  # nothing seals pathname sockets
        (9, False, None, True),  # Landlock resolves them itself
        (9, True, {"port": 1}, False),  # the gateway variant: no UNIX socket at all
    ],
)
def test_the_sequence_allows_connect_only_where_the_promise_holds(
    abi: int, private_mounts: bool, network: dict[str, int] | None, allowed: bool
) -> None:
    plan = Plan("sandbox", abi, private_mounts=private_mounts, network=network, local_sockets=True)
    assert local_sockets(plan) is allowed
    assert local_sockets(Plan("sandbox", abi, private_mounts=private_mounts)) is False


def test_the_host_rules_say_why_in_each_case() -> None:
    assert _local_sockets(7, root=True)[0] is True
    assert _local_sockets(9, root=False)[0] is True
    given, why = _local_sockets(5, root=True)
    assert not given and "ABI 6" in why
    given, why = _local_sockets(7, root=False)
    assert not given and "not root" in why and "ABI 9" in why


def _asks(host: HostIsolation, ws: Path) -> bool:
    setup = plan_for(
        "sandbox", command=["/bin/true"], workspace=str(ws), host=host, interpreter=False
    )
    try:
        return setup.plan.local_sockets
    finally:
        if setup.cleanup is not None:
            setup.cleanup()


def test_the_parent_asks_for_local_sockets_only_where_the_host_gives_them(tmp_path: Path) -> None:
    assert _asks(HostIsolation(True, 7, None, local_sockets=True), tmp_path)
    assert not _asks(HostIsolation(True, 7, None, local_sockets=False), tmp_path)
    assert not _asks(HostIsolation(False, 7, None), tmp_path)  # no private mounts, ABI < 9
    assert _asks(HostIsolation(False, 9, None), tmp_path)
