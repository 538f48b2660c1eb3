"""The zygote's user namespaces for idmapped workspaces (`_userns_for`), called in this process
as the zygote calls it per spawn request: one per mapping, a bounded number kept, and every way
it can decline (no sandbox, a plan it cannot read, a namespace it cannot make) leaves the child
to make its own. Making one needs root (the helper's maps are written from outside)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tether.child import zygote
from tether.contain import mounts

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="writing a user namespace's maps")


SANDBOX = 2147000000


def request(who: int, *, level: str = "sandbox", **plan: Any) -> dict[str, Any]:
    return {
        "op": "spawn",
        "plan": {
            "level": level,
            "abi": 1,
            "uid": SANDBOX,
            "gid": SANDBOX,
            "workspace": "/srv/ws",
            "owner": [who, who],
            "private_mounts": True,
            **plan,
        },
    }


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[dict[tuple[int, int, int, int], int]]:
    """The module's cache, empty before and closed after each test."""
    saved = dict(zygote._userns)
    zygote._userns.clear()
    yield zygote._userns
    for fd in zygote._userns.values():
        os.close(fd)
    zygote._userns.clear()
    zygote._userns.update(saved)


def _is_userns(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").startswith("user:[")


@needs_root
def test_one_namespace_is_made_per_mapping_and_given_again_for_the_same_one(
    empty_cache: dict[tuple[int, int, int, int], int],
) -> None:
    first = zygote._userns_for(request(0))
    assert first is not None and _is_userns(first)
    assert zygote._userns_for(request(0)) == first
    other = zygote._userns_for(request(1000))
    assert other is not None and other != first and _is_userns(other)
    assert set(empty_cache) == {(0, SANDBOX, 0, SANDBOX), (1000, SANDBOX, 1000, SANDBOX)}


@needs_root
def test_past_the_bound_the_oldest_namespace_is_closed_and_forgotten(
    empty_cache: dict[tuple[int, int, int, int], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(zygote, "MAX_USERNS", 2)
    made = [zygote._userns_for(request(owner)) for owner in (1, 2, 3)]
    assert None not in made
    assert sorted(owner for owner, *_ in empty_cache) == [2, 3]
    assert set(empty_cache.values()) == set(made[1:])


@pytest.mark.parametrize(
    "req",
    [
        {"op": "spawn"},
        request(0, level="process"),
        request(0, private_mounts=False),
        request(0, owner=None),
        {"op": "spawn", "plan": ["not", "a", "mapping"]},
        {"op": "spawn", "plan": {"level": "sandbox", "owner": 5}},
    ],
    ids=["no plan", "process level", "no private mounts", "no owner", "a list", "a bad owner"],
)
def test_a_request_that_needs_no_namespace_or_cannot_be_read_gets_none(
    req: dict[str, Any], empty_cache: dict[tuple[int, int, int, int], int]
) -> None:
    assert zygote._userns_for(req) is None
    assert not empty_cache


def test_a_namespace_that_cannot_be_made_is_left_to_the_child_and_not_kept(
    empty_cache: dict[tuple[int, int, int, int], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*idmap: int) -> int:
        raise PermissionError("no user namespaces here")

    monkeypatch.setattr(mounts, "idmap_userns", refuse)
    assert zygote._userns_for(request(0)) is None
    assert not empty_cache
