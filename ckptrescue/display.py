"""Names are shown, never obeyed: text from evidence made inert before a reader sees it.

File names, object keys, tensor names and archive member names come from the evidence, and an
adversary chooses them: ``evil\\x1b]52;c;…\\x07\\x1b[2J.pt`` writes the responder's clipboard and
clears the screen when printed raw; a right-to-left override makes ``gpj.pt`` read as
``tp.jpg``. Every place that shows text to a person (the terminal, the TUI, the HTML and
Markdown reports, CSV exports) passes it through :func:`shown` (a name: one line) or
:func:`shown_text` (multi-line text: newlines and tabs kept); :func:`shown_tree` does the same
for every string (keys too) in a structure. JSON written by the kit escapes every non-ASCII
and control character itself (``ensure_ascii``), so ``cat`` of it is inert too. The raw
bytes stay only in the hash-chained records.

What is escaped, visibly and unambiguously enough to read (``\\x1b``, ``\\u202e``):

* C0 controls ``U+0000``–``U+001F`` (``\\t``, ``\\n``, ``\\r`` by those names), DEL, and the C1
  controls ``U+0080``–``U+009F`` (``U+009B`` is a one-byte CSI on many terminals);
* bidirectional controls (``U+061C``, ``U+200E``/``U+200F``, ``U+202A``–``U+202E``,
  ``U+2066``–``U+2069``), zero-width and invisible formatting characters (``U+200B``–``U+200D``,
  ``U+2060``–``U+2064``, ``U+FEFF``) and the line/paragraph separators ``U+2028``/``U+2029``;
* lone surrogates: a name that is not UTF-8, decoded with ``surrogateescape``, shows each
  undecodable byte as ``\\xNN``.

Backslashes are left as they are: the escapes make the name inert, not reversible (the exact
name is in the case's records and in the JSON outputs).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from typing import Any

_FORMAT = "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
_NAME = re.compile(f"[\x00-\x1f\x7f-\x9f{_FORMAT}\ud800-\udfff]")
_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT}\ud800-\udfff]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(name: object) -> str:
    """``name`` as one inert line: every control and invisible formatting character escaped."""
    text = name if isinstance(name, str) else str(name)
    return _NAME.sub(_escape, text)


def shown_text(text: object) -> str:
    """Multi-line ``text`` made inert: like :func:`shown`, but newlines and tabs are kept."""
    value = text if isinstance(text, str) else str(text)
    return _TEXT.sub(_escape, value)


def is_inert(text: str) -> bool:
    """True when ``text`` holds nothing :func:`shown_text` would escape."""
    return _TEXT.search(text) is None


# What a character :func:`shown` would escape looks like once ``json.dumps(ensure_ascii=False)``
# (or ``repr``) has written it: C0 as \uXXXX or \n-style, DEL/C1/format/surrogates raw. A hit may
# be a false alarm (an escaped backslash); never a miss.
_DUMPED = re.compile(f"\\\\u[0-9a-fA-F]{{4}}|\\\\U[0-9a-fA-F]{{8}}|\\\\[nrtbf]|\\\\x[0-9a-fA-F]{{2}}"
                     f"|[\x7f-\x9f{_FORMAT}\ud800-\udfff]")


def _fields_or_repr(value: Any) -> Any:
    """What the walk looks at: a dataclass's init fields; anything else by its ``repr``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    return repr(value)


def _surely_inert(value: Any) -> bool:
    """True when no string in ``value`` holds anything to escape: one C-level dump and one
    search instead of a walk (the common case: every name is plain)."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=_fields_or_repr)
    except (TypeError, ValueError, RecursionError):
        return False
    return _DUMPED.search(text) is None


def shown_tree(value: Any, *, lines: bool = True) -> Any:
    """``value`` with every string in it (dict keys, list/tuple items, dataclass fields) made
    inert: :func:`shown_text` when ``lines`` (text may span lines), else :func:`shown`.

    Other values are returned as they are; dataclass instances are copied with
    :func:`dataclasses.replace`, so frozen events and findings stay what they were. A tree
    with nothing to escape is returned as it is, found so in one pass (:func:`_surely_inert`).
    """
    if _surely_inert(value):
        return value
    return _shown_walk(value, lines=lines)


def _shown_walk(value: Any, *, lines: bool) -> Any:
    show = shown_text if lines else shown
    if isinstance(value, enum.Enum):  # a Severity or a status: the kit's own words
        return value
    if isinstance(value, str):
        return show(value)
    if isinstance(value, dict):
        return {(show(k) if isinstance(k, str) else k): _shown_walk(v, lines=lines)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_shown_walk(v, lines=lines) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_shown_walk(v, lines=lines) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = _shown_walk(old, lines=lines)
            if new is not old and new != old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value


@dataclasses.dataclass
class Shown:
    """What a command shows of a step's outputs (built by a wing's pure renderer, printed by
    the front end): ``lines`` for stdout and ``asides`` for stderr beside them (both left out
    with ``--json``), ``notes`` for stderr in any case, and the exit code."""

    lines: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    exit_code: int = 0
    asides: list[str] = dataclasses.field(default_factory=list)

    def say(self, text: str) -> None:
        self.lines.append(text)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def aside(self, text: str) -> None:
        self.asides.append(text)

    @classmethod
    def answered(cls, lines: list[str], answer: str, ok: bool) -> Shown:
        """``lines`` then the one-line answer; exit 0 when ``ok``, else 1 (findings)."""
        return cls(lines=[*lines, answer], exit_code=0 if ok else 1)
