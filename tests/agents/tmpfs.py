"""Run a command with a small tmpfs of its own mounted at a directory, in a private mount
namespace (so the mount is nobody else's business and goes away with the command). Root only:
the tests that use it skip elsewhere."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

MOUNT = 'mount -t tmpfs -o "size=$1,mode=0700" tmpfs "$2" && shift 2 && exec "$@"'


@functools.cache
def why_not() -> str | None:
    """Why a tmpfs cannot be mounted here (`None`: it can)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare(1) and mount(8)"
    probe = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            MOUNT,
            "sh",
            "64k",
            "/mnt",
            "true",
        ],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a mount namespace: {probe.stderr.decode().strip()}"
    return None


def on_tmpfs(
    mount: Path, size: str, argv: list[str], *, timeout: float
) -> subprocess.CompletedProcess[str]:
    mount.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            MOUNT,
            "sh",
            size,
            str(mount),
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
