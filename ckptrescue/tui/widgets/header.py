"""The screens' header: Textual's ``Header``, whose title stays shown as it changes, and which
never ends the app when its title part is gone.

Textual's header (8.x) updates its ``HeaderTitle`` child from watchers of the app's and the
screen's title and sub-title; the first update runs on a later turn of the message loop. A
screen composed and removed before that turn (keys typed at full speed, a screen replaced at
once, the app closing) leaves the watcher a header without its title part: ``query_one``
raises ``NoMatches``, which Textual's watcher does not catch, and the exception ends the app.
This header registers the same watchers with that case caught.
"""

from __future__ import annotations

from textual.css.query import NoMatches
from textual.dom import NoScreen
from textual.events import Mount
from textual.widget import Widget
from textual.widgets import Header as TextualHeader
from textual.widgets._header import HeaderTitle


class Header(TextualHeader):
    """``textual.widgets.Header`` with a title watcher that tolerates a missing title part.

    Its mount handler takes the place of Textual's (``prevent_default``): a subclass that
    defines its own ``_on_mount`` calls this one, or the title is never shown. Written against
    Textual 8.x (``pyproject.toml`` keeps the ``tui`` extra below 9)."""

    def _on_mount(self, event: Mount) -> None:
        event.prevent_default()  # Textual's own handler would add the watchers that raise
        Widget._on_mount(self, event)

        async def set_title() -> None:
            try:
                self.query_one(HeaderTitle).update(self.format_title())
            except (NoScreen, NoMatches):
                pass  # the header is being composed or removed: nothing to show the title on

        for owner in (self.app, self.screen):
            self.watch(owner, "title", set_title)
            self.watch(owner, "sub_title", set_title)
