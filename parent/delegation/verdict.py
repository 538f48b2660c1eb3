"""The verifier's verdict, parsed by the parent from the verifier's final text.

A verdict line is `VERDICT:` then `PASS`, `FAIL` or `PARTIAL`, case-insensitive, with spaces
or markdown emphasis between them (`**VERDICT:** PASS`). The word must end there: `PASSED`,
`PASS/FAIL`, `PASS-ish` or the template `PASS|FAIL|PARTIAL` echoed back are not verdicts.

- No verdict line: `PARTIAL` (unverified), never a false `PASS`.
- Several verdict lines: the most severe wins (`FAIL` over `PARTIAL` over `PASS`). A verifier
  that wrote FAIL anywhere has not passed the change, whatever it wrote after; one that hedged
  with PARTIAL has not verified it. So `PASS` comes out only when every verdict line says PASS.
"""

from __future__ import annotations

import re
from typing import cast

from tether.parent.delegation.output import Verdict

VERDICT_LINE = re.compile(r"VERDICT:[\s*_`]*(PASS|FAIL|PARTIAL)(?![\w|/-])", re.IGNORECASE)
_SEVERITY: dict[str, int] = {"PASS": 0, "PARTIAL": 1, "FAIL": 2}


def verdicts(text: str) -> list[Verdict]:
    """Every verdict the text states, in order."""
    found: list[Verdict] = []
    for m in VERDICT_LINE.finditer(text):
        word = m.group(1).upper()  # Unicode case folding may match e.g. U+017F for "S"
        if word in _SEVERITY:
            found.append(cast(Verdict, word))
    return found


def parse_verdict(text: str) -> Verdict:
    found = verdicts(text)
    if not found:
        return "PARTIAL"
    return max(found, key=_SEVERITY.__getitem__)
