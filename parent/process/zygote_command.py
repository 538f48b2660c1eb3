"""The zygote's command: its argv and environment, with the standard library alone.

`Zygote.launch` and the `tether` command's early launch (`early`) both build the zygote's
`SpawnSpec` here, so a zygote launched early is the same process a supervisor would launch.
"""

from __future__ import annotations

import os
import sys

from tether.parent.process.markers import TREE_ENV, new_tree_marker
from tether.parent.process.start import SpawnSpec

ZYGOTE_MODULE = "tether.child.zygote"
PAD_ENV = "TETHER_ZYGOTE_ENV_AREA"
"""Same name as in `tether.child.zygote`: reserves the environment block children rewrite."""
ENV_AREA_MIN = 16 * 1024
STANDBY_AFTER: float | None = 0.025
"""Seconds without a request after which the zygote forks its standby (`None`: never; at
most 2 ms while spawns come back to back); see `tether/child/zygote.py`."""


def block_bytes(env: dict[str, str]) -> int:
    """The bytes `env` takes in a process's environment block."""
    return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items())


def zygote_spec(env: dict[str, str], fd: int, standby_after: float | None) -> SpawnSpec:
    """`python -I -m tether.child.zygote FD AFTER` in `env` (the scrubbed environment) with a
    tree marker of its own and the padding its children's environments are written into; `fd`
    is its end of the control socket."""
    env = dict(env)
    env[TREE_ENV] = new_tree_marker()
    env[PAD_ENV] = "x" * max(ENV_AREA_MIN, 4 * block_bytes(env))
    after = "off" if standby_after is None else repr(standby_after)
    argv = [sys.executable, "-I", "-m", ZYGOTE_MODULE, str(fd), after]
    return SpawnSpec(argv, env, pass_fds=(fd,))
