"""How deeply a JSON line nests, measured on its bytes before anything decodes it.

tether refuses a line whose arrays and objects nest deeper than a limit of its own
(`DEFAULT_MAX_MESSAGE_DEPTH`, announced in `initialize` as `maxMessageDepth`). The limit used to
be an accident of the interpreter: msgspec recurses once per level and stops where the
interpreter's recursion guard fires, about 1 000 levels on 3.11, 1 500 on 3.12 and 10 000 on
3.13.

Depth counts the arrays and objects open at once: `1` and `"x"` have depth 0, `{}` and `[1]`
depth 1, `{"a":[{}]}` depth 3; the JSON-RPC envelope itself is level 1, so a request's `params`
object is level 2. Brackets inside strings do not count, escaped quotes do not end a string.

Theory of operation. A pure-Python loop over a line costs about 100 ns a byte, far more than
msgspec's decode, so the measurement is made of whole-buffer operations that run in C:

1. A line with no more opening brackets than the limit, strings included, is within it. On a
   long line they are first counted with `bytes.find` (memchr: a megabyte of text in tens of
   µs), giving up past the limit; then `bytes.translate` keeps only the bytes that can matter
   (`"`, `\\`, brackets, with `{}` folded into `[]`) and they are counted again: that settles
   small messages at the cost of that one pass.
2. An escaped quote must not end a string. Where the kept bytes show a backslash right before a
   quote or another backslash, escapes are resolved on the line itself (`bytes.replace`, pairs of
   backslashes first); elsewhere a backslash escapes a letter that `translate` dropped, and is
   dropped too. (Decoding such a line with msgspec and counting its containers instead was
   measured no faster on a transcript of source files, and would let msgspec recurse.)
3. With escapes gone, quotes alternate open/close: every adjacent `""` pair is removed at once
   (an empty string, or two strings with no bracket between them), and what is left inside the
   remaining quotes is cut out. Only structural brackets remain.
4. The depth of a bracket sequence: each `[]` removal pass lowers it by exactly one, so passes
   run while they shrink the sequence well; long chains that shrink slowly are measured from
   the lengths of their runs instead (`itertools.accumulate` over run lengths).

Cost (`python -m benchmarks.depth`): a whole-buffer C pass runs at about msgspec's own speed
(0.5 ns a byte), so the check costs a sizeable fraction of decoding, not a few percent: about as
much as `decode_line` for small and mostly-string lines, less for lines rich in structure. Only a
compiled scanner, or a decoder with a depth option, would make it negligible.

For a line that is not valid JSON the result is an upper bound of the depth msgspec could reach
on it (so a too-deep malformed line is still refused before msgspec recurses), exact for every
line that is valid JSON.
"""

from __future__ import annotations

import itertools
import operator
import re

DEFAULT_MAX_MESSAGE_DEPTH = 128
"""The deepest nesting of arrays and objects a line may have, the envelope counting as level 1.

128 is deep enough for any JSON Schema or tool argument a model writes, shallow enough that a
decoder in any language handles it without a large stack, on every interpreter."""

_KEPT = b'"\\[]{}'
_DROPPED = bytes(sorted(set(range(256)) - set(_KEPT)))
_FOLD_BRACES = bytes.maketrans(b"{}", b"[]")
_RUNS = re.compile(rb"\[+|\]+")
_FIND_FROM = 4096
"""Lines longer than this are first counted with `bytes.find` (`_few_openings`); on shorter
ones one `translate` pass is cheaper than a few Python-level calls."""


def exceeds_depth(line: bytes, limit: int = DEFAULT_MAX_MESSAGE_DEPTH) -> bool:
    """Whether `line` nests deeper than `limit` (see the module docstring for "depth")."""
    if len(line) > _FIND_FROM and _few_openings(line, limit):
        return False
    marks = line.translate(_FOLD_BRACES, _DROPPED)
    if marks.count(b"[") <= limit:
        return False
    if b"\\" in marks:
        if b'\\"' in marks or b"\\\\" in marks:
            # Maybe an escaped quote or backslash: pairs of backslashes first, so that in `\\"`
            # the quote stays a quote, then escaped quotes.
            if b"\\\\" in marks:
                line = line.replace(b"\\\\", b"")
            marks = line.replace(b'\\"', b"").translate(_FOLD_BRACES, _DROPPED)
        marks = marks.replace(b"\\", b"")
    return _bracket_depth(_outside_strings(marks), limit) > limit


def view_exceeds_depth(line: memoryview, limit: int = DEFAULT_MAX_MESSAGE_DEPTH) -> bool:
    """`exceeds_depth` for a view of the start of a `bytearray` (a framer's long line): counted
    in place with `find`, copied only when it has more openings than the limit."""
    base = line.obj
    if isinstance(base, bytearray) and _few_openings(base, limit, len(line)):
        return False
    return exceeds_depth(bytes(line), limit)


def _few_openings(line: bytes | bytearray, limit: int, end: int | None = None) -> bool:
    """Whether `line` has at most `limit` opening brackets, strings included (so it is within
    the limit): step 1's test without the `translate` pass. `bytes.find` skips the bytes between
    two brackets at memchr speed, ≈ 20 times faster than `translate` on a large line of text,
    and the count stops once it passes the limit."""
    seen = 0
    for bracket in (b"[", b"{"):
        at = line.find(bracket, 0, end)
        while at >= 0:
            seen += 1
            if seen > limit:
                return False
            at = line.find(bracket, at + 1, end)
    return True


def _outside_strings(marks: bytes) -> bytes:
    """The brackets of `marks` (quotes and brackets, escapes resolved) that are not in a string."""
    marks = marks.replace(b'""', b"")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[::2])
    return marks


def _bracket_depth(seq: bytes, limit: int) -> int:
    """An upper bound of the deepest prefix depth of a `[`/`]` sequence, exact when it is
    balanced; any value that is not above `limit` only promises to be at most `limit`."""
    peeled = 0
    while True:
        opens = seq.count(b"[")
        if peeled + opens <= limit or peeled > limit:
            return peeled + opens
        inner = seq.replace(b"[]", b"")
        if len(inner) == len(seq):
            break
        peeled += 1
        shrank_well = (len(seq) - len(inner)) * 8 >= len(seq)
        seq = inner
        if not shrank_well:
            break
    lengths = [len(run) for run in _RUNS.findall(seq)]
    if not lengths:
        return peeled
    # Runs alternate between opening and closing brackets: negate the closing ones.
    closing = slice(0, None, 2) if seq[:1] == b"]" else slice(1, None, 2)
    lengths[closing] = map(operator.neg, lengths[closing])
    return peeled + max(itertools.accumulate(lengths, initial=0))
