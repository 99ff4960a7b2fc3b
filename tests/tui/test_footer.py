"""The screens' footer (``tui/widgets/footer.py``) shows the keys of what has focus, rebuilt when
they change (focus, a key disabled and enabled again) and only then: focus moving between two
inputs with the same keys, or the screen settling after its first paint, rebuilds nothing
(Textual's own footer rebuilt every time: on the guided flow's first screen, three rebuilds for
the same keys)."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Button, Input
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey
from tui_testlib import drive

from ckptrescue.tui.widgets.footer import Footer


class _Saving(Input):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("f2", "noop", "Save")]


class _Deleting(Button):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("f3", "delete", "Delete")]

    def action_delete(self) -> None:
        pass

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # None: shown, disabled
        return None if action == "delete" and not self.app.allow_delete else True  # type: ignore[attr-defined]


class _Keys(App[None]):
    def __init__(self, footer: type[TextualFooter]) -> None:
        super().__init__()
        self._footer = footer
        self.allow_delete = True

    def compose(self) -> ComposeResult:
        yield _Saving(id="one")
        yield _Saving(id="two")
        yield _Deleting("delete", id="three")
        yield self._footer()

    def action_noop(self) -> None:
        pass


def _watch(footer: type[TextualFooter]) -> list[tuple[str, list[tuple[str, str, bool]], int]]:
    """(what was done, the keys the footer shows, how many times it was built) at each step:
    focus moved to a widget, or the Delete key disabled ("off") and enabled again ("on")."""
    app = _Keys(footer)
    builds = [0]
    compose = footer.compose

    def counted(self: TextualFooter) -> ComposeResult:
        builds[0] += 1
        yield from compose(self)

    seen: list[tuple[str, list[tuple[str, str, bool]], int]] = []

    async def script(pilot: Any) -> None:
        footer.compose = counted  # type: ignore[method-assign]
        try:
            for step in ("one", "two", "three", "off", "on", "one"):
                if step in ("off", "on"):
                    app.allow_delete = step == "on"
                    app.refresh_bindings()
                else:
                    app.query_one(f"#{step}").focus()
                await pilot.pause()
                await pilot.pause()
                shown = [(str(k.key_display), str(k.description), k.has_class("-disabled"))
                         for k in app.screen.query(FooterKey)]
                seen.append((step, shown, builds[0]))
        finally:
            footer.compose = compose  # type: ignore[method-assign]

    drive(app, script)
    return seen


def test_the_footer_shows_the_focused_keys_and_rebuilds_only_when_they_change() -> None:
    seen = _watch(Footer)
    save, palette = ("f2", "Save", False), ("^p", "palette", False)
    assert [(t, keys) for t, keys, _ in seen] == [
        ("one", [save, palette]), ("two", [save, palette]),
        ("three", [("f3", "Delete", False), palette]),
        ("off", [("f3", "Delete", True), palette]),
        ("on", [("f3", "Delete", False), palette]), ("one", [save, palette])]
    builds = [n for _, _, n in seen]
    assert builds[1] == builds[0], "focus moved between inputs with the same keys: rebuilt"
    assert [b - a for a, b in itertools.pairwise(builds[1:])] == [1, 1, 1, 1], builds


def test_textuals_footer_shows_the_same_keys_and_rebuilds_more() -> None:
    """The keys are Textual's own, in its order, disabled where it disables them, at every
    step; Textual's footer rebuilt them for the focus move that changed nothing."""
    ours, textuals = _watch(Footer), _watch(TextualFooter)
    assert [(t, keys) for t, keys, _ in ours] == [(t, keys) for t, keys, _ in textuals]
    assert textuals[1][2] > textuals[0][2]
