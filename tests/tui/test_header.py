"""The screens' header (``tui/widgets/header.py``) shows the title as it changes, and a title
change that reaches a header whose title part is gone (a screen composed and removed at once:
keys typed at full speed, the app closing) does not end the app. Textual's own header raised
``NoMatches`` there and the app ended with it (a TUI test once failed so, in CI; with
``textual.widgets.Header`` in place of the kit's, Textual 8.2.8, this test fails so)."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import Header as TextualHeader
from textual.widgets._header import HeaderTitle
from tui_testlib import drive

from ckptrescue.tui.widgets.header import Header


class _Titled(App[None]):
    def __init__(self, header: type[TextualHeader]) -> None:
        super().__init__()
        self._header = header

    def compose(self) -> ComposeResult:
        yield self._header()


def _shown_title(app: App[None]) -> str:
    return str(app.screen.query_one(HeaderTitle).render())


def _title_after_losing_the_title_part(header: type[TextualHeader]) -> list[str]:
    app = _Titled(header)
    seen: list[str] = []

    async def script(pilot: Any) -> None:
        app.title = "case INC-7"
        await pilot.pause()
        seen.append(_shown_title(app))
        await app.screen.query_one(HeaderTitle).remove()
        app.sub_title = "after the title part went"  # the watchers run on the next turn
        await pilot.pause()
        seen.append("app still running")

    drive(app, script)
    return seen


def test_the_header_shows_title_changes_and_outlives_its_title_part() -> None:
    assert _title_after_losing_the_title_part(Header) == ["case INC-7", "app still running"]

