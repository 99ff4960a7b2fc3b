"""ckptrescue.display: names from the evidence are made inert, visibly, and nothing else
changes."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from ckptrescue.display import is_inert, shown, shown_text, shown_tree
from ckptrescue.model import Finding, Severity

OBEYED = [chr(c) for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))] + [
    "\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
    "\u2066", "\u2067", "\u2068", "\u2069", "\u2028", "\u2029", "\u200b", "\ufeff"]


def test_the_issue_example_is_shown_escaped() -> None:
    name = "evil\x1b]52;c;aGk=\x07\x1b[2J.pt"
    assert shown(name) == "evil\\x1b]52;c;aGk=\\x07\\x1b[2J.pt"


def test_every_control_and_bidi_character_is_escaped_visibly() -> None:
    for char in OBEYED:
        out = shown(f"a{char}b")
        assert out.startswith("a\\") and out.endswith("b") and out.isascii(), repr(char)
    assert shown("\u009b") == "\\x9b" and shown("\u202e") == "\\u202e"
    assert shown("a\tb\nc\rd") == "a\\tb\\nc\\rd"


def test_text_keeps_its_lines_and_tabs_only() -> None:
    assert shown_text("one\ttwo\nthree\r\x1b[2J") == "one\ttwo\nthree\\r\\x1b[2J"
    assert is_inert("one\ttwo\n") and not is_inert("x\x1b")


def test_a_name_that_is_not_utf8_shows_its_bytes() -> None:
    raw = b"step-\xff\xfe.pt".decode("utf-8", "surrogateescape")
    assert shown(raw) == "step-\\xff\\xfe.pt"


@given(st.text())
def test_printable_text_is_unchanged_and_the_rest_is_inert(text: str) -> None:
    out = shown(text)
    assert is_inert(out) and "\n" not in out and "\t" not in out
    if all(c not in OBEYED and not 0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert out == text  # ordinary names (accents, CJK, emoji, backslashes) stay as written


def test_tree_reaches_keys_items_and_dataclass_fields_and_keeps_enums() -> None:
    f = Finding("TZ002", Severity.ERROR, "bad \x1b[2J", tensors=("w\x07",),
                details={"k\x1b": ["v\x9b"]})
    out = shown_tree({"x\x1b": [f, ("t\x07", 3)]}, lines=False)
    (key, [g, tup]), = out.items()
    assert key == "x\\x1b" and tup == ("t\\x07", 3)
    assert g.title == "bad \\x1b[2J" and g.tensors == ("w\\x07",)
    assert g.details == {"k\\x1b": ["v\\x9b"]} and g.severity is Severity.ERROR
    assert f.title == "bad \x1b[2J" and f.details == {"k\x1b": ["v\x9b"]}  # untouched
    assert shown_tree(f) is not f and shown_tree(Finding("A", Severity.INFO, "ok")).title == "ok"


@given(st.text(), st.text())
def test_tree_shows_every_string_as_shown_does_whatever_it_holds(name: str, title: str) -> None:
    """The tree's one-pass shortcut for plain trees never lets a string through unescaped:
    keys, items and dataclass fields come out exactly as :func:`shown` makes them."""
    assume(shown(name) != "k")
    f = Finding("TZ002", Severity.ERROR, title, details={name: [title]})
    out = shown_tree({name: [f, (title, 1)], "k": name}, lines=False)
    g, tup = out[shown(name)]
    assert out["k"] == shown(name) and tup == (shown(title), 1)
    assert g.title == shown(title) and g.details == {shown(name): [shown(title)]}
