"""A plan is plain JSON that survives the trip to the trampoline and the zygote unchanged."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tether.contain.plan import DEFAULT_SANDBOX_ID, ETC_READ, Plan, system_reads

ids = st.none() | st.integers(min_value=0, max_value=2**32 - 2)
path = st.text(min_size=1, max_size=30).map(lambda s: "/" + s)


@given(
    st.sampled_from(["sandbox", "process"]),
    st.integers(min_value=0, max_value=9),
    ids,
    ids,
    st.none() | path,
    st.none() | st.tuples(st.integers(0, 65535), st.integers(0, 65535)),
    st.lists(path, max_size=5),
    st.lists(path, max_size=3),
    st.booleans(),
)
def test_a_plan_round_trips_through_json(
    level: str,
    abi: int,
    uid: int | None,
    gid: int | None,
    ws: str | None,
    owner: tuple[int, int] | None,
    reads: list[str],
    writes: list[str],
    mounts: bool,
) -> None:
    plan = Plan(level, abi, uid, gid, ws, owner, reads, writes, private_mounts=mounts, cwd=ws)
    again = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan
    assert again.sandboxed == (level == "sandbox")


def test_no_plan_means_process_isolation() -> None:
    assert not Plan.from_json(None).sandboxed
    assert Plan.from_json({}) == Plan()


def test_etc_is_granted_entry_by_entry_and_never_as_a_whole_or_its_secrets() -> None:
    reads = system_reads()
    assert "/etc" not in reads
    for secret in ("shadow", "gshadow", "ssh", "sudoers", "pip.conf", "npmrc"):
        assert secret not in ETC_READ
        assert f"/etc/{secret}" not in reads


def test_the_default_sandbox_id_is_outside_every_range_hosts_hand_out() -> None:
    assert DEFAULT_SANDBOX_ID > 165535 + 65536 * 10_000
    assert DEFAULT_SANDBOX_ID < 2**31 - 1
