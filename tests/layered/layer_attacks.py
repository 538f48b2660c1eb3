"""What a hostile child in a layered workspace tries against the workspace's real files, as one
stdlib-only script: `python layer_attacks.py` (run in its workspace) prints `{attack: outcome}`
as JSON, each outcome `refused: ERRNO` or `ok: ...`. Whatever it manages lands in its layer;
the test checks the base on disk afterwards and the change set the parent computed."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
from collections.abc import Callable

libc = ctypes.CDLL(None, use_errno=True)
WS = os.getcwd()
NAME = os.path.basename(WS)


def outcome(fn: Callable[[], object]) -> str:
    try:
        got = fn()
    except OSError as exc:
        return f"refused: {errno.errorcode.get(exc.errno or 0, str(exc))}"
    return f"ok: {got}"


def write(path: str, text: str) -> str:
    with open(path, "a") as f:
        f.write(text)
    return path


def through_abs_link() -> str:
    os.symlink(os.path.join(WS, "canary.txt"), "abs-link")
    return write("abs-link", "via an absolute link\n")


def through_dotdot() -> str:
    return write(f"../{NAME}/canary.txt", "via ..\n")


def through_proc_root() -> str:
    return write(f"/proc/self/root{WS}/canary.txt", "via /proc/self/root\n")


def hard_link() -> str:
    os.link("canary.txt", "hard.txt")
    return write("hard.txt", "via a hard link\n")


def hard_link_from_tmp() -> str:
    with open("/tmp/mine", "w") as f:
        f.write("mine\n")
    os.link("/tmp/mine", "from-tmp.txt")
    return "linked"


def rename_out() -> str:
    os.rename("canary.txt", "/tmp/canary-out")
    return "renamed"


def rename_in() -> str:
    with open("/tmp/in.txt", "w") as f:
        f.write("in\n")
    os.rename("/tmp/in.txt", "in.txt")
    return "renamed"


def rename_dir_out() -> str:
    os.rename("dir", "/tmp/dir-out")
    return "renamed"


def mknod_device() -> str:
    os.mknod("disk", stat.S_IFBLK | 0o600, os.makedev(8, 0))
    return "made"


def mknod_whiteout() -> str:
    os.mknod("fake-whiteout", stat.S_IFCHR | 0o600, 0)
    return "made"


def umount_layer() -> str:
    if libc.umount2(WS.encode(), 2) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return "unmounted"


def overlay_xattr() -> str:
    os.setxattr("canary.txt", "trusted.overlay.redirect", b"/etc")
    return "set"


def user_overlay_xattr() -> str:
    os.setxattr("dir", "user.overlay.opaque", b"y")
    return "set"


def staging() -> str:
    return str(os.listdir("/tmp/.tether-layer"))


def setuid_file() -> str:
    with open("suid.sh", "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod("suid.sh", 0o4755)
    return oct(os.stat("suid.sh").st_mode)


ATTACKS: dict[str, Callable[[], object]] = {
    "abs_link": through_abs_link,
    "dotdot": through_dotdot,
    "proc_root": through_proc_root,
    "hard_link": hard_link,
    "hard_link_from_tmp": hard_link_from_tmp,
    "rename_in": rename_in,
    "rename_dir_out": rename_dir_out,
    "mknod_device": mknod_device,
    "mknod_whiteout": mknod_whiteout,
    "umount_layer": umount_layer,
    "overlay_xattr": overlay_xattr,
    "user_overlay_xattr": user_overlay_xattr,
    "staging": staging,
    "setuid_file": setuid_file,
    "rename_out": rename_out,  # last: it takes the canary away
}

if __name__ == "__main__":
    print(json.dumps({name: outcome(fn) for name, fn in ATTACKS.items()}))
