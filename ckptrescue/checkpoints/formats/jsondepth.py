"""Bounded JSON nesting, checked before a recursive parser sees the text (pure).

``json.loads`` recurses once per ``[``/``{``; a header nested 50,000 deep raises
``RecursionError`` (or worse, in a thread with a small stack). :func:`too_deep` walks only the
brackets and strings (one regex pass, stopping at the first level past the limit), so a parser is
only run on text whose nesting is known to be bounded.
"""

from __future__ import annotations

import re

_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPEN = frozenset(b"[{")


def too_deep(text: bytes, limit: int) -> int | None:
    """The byte offset where nesting first exceeds ``limit`` levels, or None when it never does.

    Strings (with their escapes) are skipped, so brackets inside them do not count; an
    unterminated string ends the scan (the parser will report it).
    """
    depth = 0
    for m in _TOKENS.finditer(text):
        c = text[m.start()]
        if c in _OPEN:
            depth += 1
            if depth > limit:
                return m.start()
        elif c != 0x22:  # a closing bracket (a string token starts with '"')
            depth -= 1
    return None
