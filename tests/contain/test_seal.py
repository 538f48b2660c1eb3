"""The sealed view (`mounts.py`): the pure rules that decide what is cloned, and the mechanism
applied alone to a real process — a host socket world-writable and listening is refused even
to root once sealed, a socket bound in the private /tmp is reachable, a mount that can neither
be idmapped nor shown socket-free leaves the view unsealed (the child then gets no connect)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.contain.mounts import MountEntry, parse_mountinfo, seal_plan
from tether.parent.process.isolation import probe_host

HERE = Path(__file__).parent
needs_sealing = pytest.mark.skipif(
    os.geteuid() != 0 or probe_host().why_not is not None,
    reason="sealing needs a root supervisor on a host that sandboxes",
)

MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /proc rw,nosuid shared:2 - proc proc rw
24 22 0:5 / /dev rw,nosuid shared:3 - devtmpfs devtmpfs rw,mode=755
25 24 0:23 / /dev/shm rw - tmpfs tmpfs rw
26 22 0:24 / /mnt/my\\040disk rw - ext4 /dev/vdb rw
27 22 7:0 / /snap/core/1 ro,nodev - squashfs /dev/loop0 ro
28 22 0:25 / /tmp rw - tmpfs tmpfs rw
29 22 0:26 / /tmp rw - ramfs ramfs rw
30 28 0:27 / /tmp/inner rw - fuse.sshfs host:/ rw
"""


def test_mountinfo_is_read_with_its_escapes_and_read_only_superblocks() -> None:
    got = {e.path: e for e in parse_mountinfo(MOUNTINFO)}
    assert "/mnt/my disk" in got
    assert got["/snap/core/1"].read_only and not got["/proc"].read_only
    assert got["/tmp/inner"].fstype == "fuse.sshfs"
    assert len(parse_mountinfo(MOUNTINFO)) == 9


def test_the_seal_clones_the_mount_on_top_at_each_path_outermost_first_and_never_dev() -> None:
    root, rest = seal_plan(parse_mountinfo(MOUNTINFO))
    assert root is not None and root.fstype == "ext4"
    paths = [e.path for e in rest]
    assert not any(p == "/dev" or p.startswith("/dev/") for p in paths)
    assert paths.count("/tmp") == 1
    assert next(e for e in rest if e.path == "/tmp").fstype == "ramfs"  # the later mount
    assert paths.index("/tmp") < paths.index("/tmp/inner")


@given(
    st.lists(st.sampled_from(["/", "/a", "/a/b", "/a/b/c", "/dev", "/dev/x", "/z"]), max_size=12)
)
def test_every_mount_outside_dev_is_cloned_once_and_after_its_parent(points: list[str]) -> None:
    entries = [MountEntry(p, "ext4", False) for p in points]
    root, rest = seal_plan(entries)
    paths = [e.path for e in rest]
    assert sorted(paths) == sorted({p for p in points if p != "/" and not p.startswith("/dev")})
    assert (root is not None) == ("/" in points)
    for i, p in enumerate(paths):
        assert all(not p.startswith(q + "/") for q in paths[i + 1 :])


def _sealed(what: str, where: Path) -> dict[str, str]:
    got = subprocess.run(
        [sys.executable, "-I", str(HERE / "sealed.py"), what, str(where)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert got.returncode == 0, got.stderr
    out: dict[str, str] = json.loads(got.stdout)
    return out


@needs_sealing
def test_once_sealed_a_host_socket_is_refused_even_to_root_and_the_runs_own_is_reachable(
    tmp_path: Path,
) -> None:
    where = Path("/var/tmp") / f"tether-seal-{os.getpid()}"  # not under the private /tmp
    where.mkdir(mode=0o755)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(where / "listen.sock"))
        listener.listen()
        (where / "listen.sock").chmod(0o777)
        (where / "file.txt").write_text("hello")
        got = _sealed("seal", where)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
        for name in ("listen.sock", "file.txt"):
            (where / name).unlink(missing_ok=True)
        where.rmdir()
    # /var/tmp is covered by the run's own tmpfs in a real sandbox; here only /tmp is.
    assert got["connect_outside"] == "EACCES", got
    assert got["read_beside"] == "ok: 'hello'" and got["owner_seen"] == "65534", got
    assert got["dev"] == "ok: ['fd', 'null', 'shm', 'stderr', 'stdin', 'stdout']", got
    assert got["dev_null"] == "ok: 1" and got["own_socket"] == "ok", got


@needs_sealing
def test_a_mount_that_could_hold_a_socket_and_cannot_be_idmapped_leaves_the_view_unsealed(
    tmp_path: Path,
) -> None:
    got = _sealed("unsealable", tmp_path)
    assert f"the mount at {tmp_path} (ramfs) cannot be idmapped" in got["unsealed"], got


def test_only_mounts_that_hold_or_lie_in_a_grant_are_cloned() -> None:
    """Landlock grants nothing in the others (here /mnt/my disk and /snap): they are left out,
    which shows the empty directory beneath and saves a clone at every spawn."""
    _, rest = seal_plan(parse_mountinfo(MOUNTINFO), ["/proc", "/tmp/inner/x", "/usr"])
    assert [e.path for e in rest] == ["/proc", "/tmp", "/tmp/inner"]
    _, rest = seal_plan(parse_mountinfo(MOUNTINFO), ["/tmp"])
    assert [e.path for e in rest] == ["/tmp", "/tmp/inner"]


@needs_sealing
def test_a_child_whose_view_cannot_be_sealed_runs_without_connect_and_is_told_why(
    tmp_path: Path,
) -> None:
    if not probe_host().local_sockets:
        pytest.skip("this host gives no local sockets at all")
    got = _sealed("degraded", tmp_path)
    assert got.get("connect_own") == "Permission denied", got
    assert got["told"].startswith("refused: the mount at ") and "(ramfs)" in got["told"], got


@given(
    st.lists(
        st.sampled_from(["/", "/a", "/a/b", "/a/b/c", "/ab", "/dev", "/dev/x", "/z", "/z/y"]),
        max_size=12,
    ),
    st.lists(st.sampled_from(["/", "/a", "/a/b", "/a/bc", "/ab/c", "/z/y/x", "/q"]), max_size=8),
)
def test_the_mounts_a_grant_needs_are_those_that_hold_it_or_lie_in_it(
    points: list[str], needed: list[str]
) -> None:
    def under(p: str, root: str) -> bool:
        return p == root or p.startswith(root.rstrip("/") + "/")

    entries = [MountEntry(p, "ext4", False) for p in points]
    _, every = seal_plan(entries)
    _, rest = seal_plan(entries, needed)
    expected = [e for e in every if any(under(n, e.path) or under(e.path, n) for n in needed)]
    assert [e.path for e in rest] == [e.path for e in expected]
