"""The screens' footer: Textual's ``Footer``, rebuilt only when the keys it shows change.

Textual's footer (8.x) rebuilds all its key widgets after every change to the screen's
bindings (``bindings_updated_signal``: a focus change, a screen mounted, the app focused), even
when the keys it shows are the same. A screen's first paint here rebuilt it three times, about
15 ms of CPU each, the same keys every time after the first. This footer rebuilds when what it
would show differs from what it shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Footer as TextualFooter

if TYPE_CHECKING:
    from textual.app import ComposeResult
    from textual.screen import Screen

Shown = tuple[object, ...]


class Footer(TextualFooter):
    """``textual.widgets.Footer`` without the rebuilds that change nothing. Written against
    Textual 8.x (``pyproject.toml`` keeps the ``tui`` extra below 9)."""

    _shown: Shown | None = None  # what the last compose showed (None: nothing yet)

    def keys_shown(self) -> Shown | None:
        """Everything ``compose`` reads to lay out the keys (None while the bindings are not
        ready: it shows nothing then)."""
        if not self._bindings_ready:
            return None
        app = self.app
        return (
            tuple((b.key, app.get_key_display(b), b.description, b.action, b.show,
                   (b.group.description, b.group.compact) if b.group is not None else None,
                   b.tooltip, enabled, tooltip)
                  for _node, b, enabled, tooltip in self.screen.active_bindings.values()),
            self.show_command_palette, app.ENABLE_COMMAND_PALETTE, app.COMMAND_PALETTE_BINDING,
        )

    def compose(self) -> ComposeResult:
        self._shown = self.keys_shown()
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._rebuild_if_changed)

    async def _rebuild_if_changed(self) -> None:
        if self.is_attached and self.keys_shown() != self._shown:
            await self.recompose()
