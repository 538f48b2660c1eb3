"""Tree markers: the `TETHER_TREE` value every child starts with, minted here (see `tree`,
which matches them). A module of the standard library alone, so that a zygote launched before
the command line's imports (`early`) carries a marker of the same kind as every other child."""

from __future__ import annotations

import itertools
import os

TREE_ENV = "TETHER_TREE"
"""The variable every child carries, so teardown can find processes that left the tree."""

_tree_ids = itertools.count(1)


def marker_prefix() -> str:
    """The prefix of every tree marker this process mints."""
    return f"{os.getpid()}-"


def new_tree_marker() -> str:
    """A marker unique to one child; its prefix is this supervisor's pid."""
    return f"{marker_prefix()}{os.urandom(3).hex()}-{next(_tree_ids)}"
