"""Which commands the trampoline becomes in place instead of exec'ing (see `trampoline.py`),
and the trampoline's own argv for a command: the parent and the trampoline decide alike.

Only the standard library's `sys`: the trampoline imports this before anything else.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

OWN_CHILD = ("-I", "-m", "tether.child")
"""After `sys.executable`: tether's own child, the command run in place."""


def runs_in_place(command: Sequence[str]) -> bool:
    """Whether the trampoline becomes `command` in place: tether's own child, run by this
    interpreter."""
    return list(command[:1]) == [sys.executable] and tuple(command[1:4]) == OWN_CHILD


def trampoline_argv(trampoline: str, config: str, command: Sequence[str]) -> list[str]:
    """`python -I -S trampoline.py CONFIG -- COMMAND`, or `python -I ...` for a command run in
    place: the interpreter then starts with the flags the command names (`-I`, site)."""
    flags = ["-I"] if runs_in_place(command) else ["-I", "-S"]
    return [sys.executable, *flags, trampoline, config, "--", *command]
