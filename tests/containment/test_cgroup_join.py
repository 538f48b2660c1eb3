"""The doctor measures what a child's cgroup join costs here and says how to make it cheap."""

from __future__ import annotations

import os

import pytest

from tether.parent.process import cgroup_join
from tether.parent.process.host import PREFIX, host

MOUNTINFO = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,{opts}\n"
)


def test_the_cgroup2_mount_and_its_super_block_options_are_read_from_mountinfo() -> None:
    got = cgroup_join.cgroup2_mount(MOUNTINFO.format(opts="nsdelegate,favordynmods"))
    assert got == ("/sys/fs/cgroup/unified", {"rw", "nsdelegate", "favordynmods"})
    assert cgroup_join.cgroup2_mount(MOUNTINFO.splitlines()[1] + "\n") is None


def test_a_slow_join_on_a_kernel_with_favordynmods_gets_the_remount_command() -> None:
    mount = cgroup_join.cgroup2_mount(MOUNTINFO.format(opts="nsdelegate"))
    tip = cgroup_join.advice(12.5, mount, {"nsdelegate", "favordynmods"})
    assert tip is not None
    assert "12.5 ms" in tip and "mount -o remount,favordynmods /sys/fs/cgroup/unified" in tip


def test_a_fast_join_or_one_already_favoured_gets_no_advice() -> None:
    plain = cgroup_join.cgroup2_mount(MOUNTINFO.format(opts="nsdelegate"))
    favoured = cgroup_join.cgroup2_mount(MOUNTINFO.format(opts="favordynmods"))
    assert cgroup_join.advice(0.5, plain, {"favordynmods"}) is None
    assert cgroup_join.advice(None, plain, {"favordynmods"}) is None
    assert cgroup_join.advice(20.0, favoured, {"favordynmods"}) is None


def test_a_kernel_without_favordynmods_is_told_which_kernels_have_it() -> None:
    mount = cgroup_join.cgroup2_mount(MOUNTINFO.format(opts="nsdelegate"))
    tip = cgroup_join.advice(9.0, mount, {"nsdelegate"})
    assert tip is not None and "6.0+" in tip and "remount" not in tip
    assert "favordynmods" in (cgroup_join.advice(9.0, None, set()) or "")


def test_the_join_is_measured_on_a_real_cgroup_and_the_cgroup_is_removed() -> None:
    h = host()
    if not h.parents:
        pytest.skip(f"no cgroup tier on this host ({h.tier}): nothing to join")
    ours = f"{PREFIX}doctor-{os.getpid()}-"  # other test processes may measure meanwhile
    got = cgroup_join.measure(h, samples=2)
    assert got is not None and 0 < got < 5_000
    for parent in h.parents.values():
        left = [d.name for d in parent.iterdir() if d.name.startswith(ours)]
        assert left == [], f"the doctor left {left} in {parent}"


def test_the_doctor_reports_the_join_in_its_json() -> None:
    h = host()
    got = cgroup_join.report(h)
    assert set(got) >= {"joinMs", "favordynmods"}
    if h.parents:
        assert isinstance(got["joinMs"], float)
