"""The trampoline's configuration as one argv word: `marshal`, in hex.

The trampoline starts every exec'd child, so what it imports is paid by every cold spawn.
`json` alone imports `re` and `enum` (≈ 5 ms of a bare interpreter's start on a 2-core VM);
`marshal` is built into the interpreter and costs nothing to import. The parent and the
trampoline always run the same interpreter (`sys.executable`, also under a launcher), so the
format is the same at both ends. A word that starts with `{` is read as JSON, for people who
run the trampoline by hand.

    python -c "import marshal, sys; print(marshal.loads(bytes.fromhex(sys.argv[1])))" WORD
"""

from __future__ import annotations

import marshal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def encode(config: dict[str, Any]) -> str:
    return marshal.dumps(config).hex()


def decode(word: str) -> dict[str, Any]:
    """Raises `ValueError` for a word that is neither."""
    if word.startswith("{"):
        import json

        got = json.loads(word)
    else:
        try:
            got = marshal.loads(bytes.fromhex(word))
        except (EOFError, TypeError) as exc:
            raise ValueError(f"not a trampoline configuration: {exc}") from None
    if not isinstance(got, dict):
        raise ValueError("the trampoline's configuration is not a mapping")
    return got
