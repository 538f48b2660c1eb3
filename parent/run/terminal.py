"""Text a child wrote, made safe to show on a terminal.

A child's summary, messages, stderr, tool arguments and even file names are the child's words,
and a hostile child can put terminal escape sequences in them: set the window title, rewrite
what was printed above, hide text, or pose as the supervisor's own output. Before any of it is
printed for people, `clean()` removes escape sequences (CSI, OSC, DCS and the rest), every
other C0 and C1 control character (tab and, in multi-line text, newline kept), DEL, and the
Unicode controls that reorder text (bidirectional overrides and isolates). JSON output needs
none of this: its encoder escapes control characters.
"""

from __future__ import annotations

import re

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI ... final byte
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, DCS, SOS, PM, APC ... terminator
    r"|\x1b[ -/]*[0-~]"  # two-byte and nF escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x90\x9d\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c|\x1b\\)?"  # 8-bit string commands
)
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str, *, multiline: bool = True) -> str:
    """`text` without escape sequences and control characters; single-line text also has its
    newlines turned into spaces."""
    text = _ESCAPES.sub("", text)
    if not multiline:
        text = text.replace("\n", " ").replace("\r", " ")
    return _CONTROLS.sub("", text)
