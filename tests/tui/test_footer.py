"""The screens' footer (``tui/widgets/footer.py``) shows the keys of what has focus, rebuilt when
they change and only then: focus moving between two inputs with the same keys, or the screen
settling after its first paint, rebuilds nothing (Textual's own footer rebuilt every time: on
the guided flow's first screen, three rebuilds for the same keys)."""

from __future__ import annotations

from typing import Any, ClassVar

from conftest import drive
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Button, Input
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey

from ckptrescue.tui.widgets.footer import Footer


class _Saving(Input):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("f2", "noop", "Save")]


class _Deleting(Button):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("f3", "noop", "Delete")]


class _Keys(App[None]):
    def __init__(self, footer: type[TextualFooter]) -> None:
        super().__init__()
        self._footer = footer

    def compose(self) -> ComposeResult:
        yield _Saving(id="one")
        yield _Saving(id="two")
        yield _Deleting("delete", id="three")
        yield self._footer()

    def action_noop(self) -> None:
        pass


def _watch(footer: type[TextualFooter]) -> list[tuple[str, list[str], int]]:
    """(what has focus, the keys the footer shows, how many times it was built) at each step."""
    app = _Keys(footer)
    builds = [0]
    compose = footer.compose

    def counted(self: TextualFooter) -> ComposeResult:
        builds[0] += 1
        yield from compose(self)

    seen: list[tuple[str, list[str], int]] = []

    async def script(pilot: Any) -> None:
        footer.compose = counted  # type: ignore[method-assign]
        try:
            for target in ("one", "two", "three", "one"):
                app.query_one(f"#{target}").focus()
                await pilot.pause()
                await pilot.pause()
                shown = [str(k.description) for k in app.screen.query(FooterKey)]
                seen.append((target, sorted(shown), builds[0]))
        finally:
            footer.compose = compose  # type: ignore[method-assign]

    drive(app, script)
    return seen


def test_the_footer_shows_the_focused_keys_and_rebuilds_only_when_they_change() -> None:
    seen = _watch(Footer)
    assert [(t, keys) for t, keys, _ in seen] == [
        ("one", ["Save", "palette"]), ("two", ["Save", "palette"]),
        ("three", ["Delete", "palette"]), ("one", ["Save", "palette"])]
    builds = [n for _, _, n in seen]
    assert builds[1] == builds[0], "focus moved between inputs with the same keys: rebuilt"
    assert builds[2] == builds[1] + 1 and builds[3] == builds[2] + 1, builds


def test_textuals_footer_shows_the_same_keys() -> None:
    """The keys are Textual's own: the same as its footer shows, at every step."""
    ours = [(t, keys) for t, keys, _ in _watch(Footer)]
    assert ours == [(t, keys) for t, keys, _ in _watch(TextualFooter)]
