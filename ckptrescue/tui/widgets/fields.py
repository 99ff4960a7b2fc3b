"""Form fields that keep every keystroke in order, however fast it comes.

Textual hands a key to the focused widget's message queue; printable characters are inserted
there, but a key the widget *binds* (backspace, left, end in a text box; space in a checkbox)
bubbles up through its parents' queues to the app, which runs the binding only then — after the
characters typed behind it were already inserted. Typed at full speed, ``abc<backspace>d`` became
``abcd`` with the ``d`` deleted later; a checkbox's space ran against whichever widget had the
focus by then. These fields run their own bindings as the key reaches them, in order.

(Tab and Enter, which move the focus, are priority bindings of the app and the screens: they run
before the next key is routed, so the keys after them reach the new field.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from textual import events
from textual.widget import Widget
from textual.widgets import Checkbox, Input, OptionList


class _InOrder:
    """Runs the widget's own (non-priority) binding for a key when the key reaches it."""

    async def _run_own_binding(self, event: events.Key) -> bool:
        widget: Any = self
        for binding in widget._bindings.key_to_bindings.get(event.key, ()):  # noqa: SLF001
            if binding.priority:
                continue
            event.stop()
            event.prevent_default()
            await widget.run_action(binding.action)
            return True
        return False


class FieldInput(_InOrder, Input):
    """A text box whose editing keys apply in the order they were typed."""

    async def _on_key(self, event: events.Key) -> None:
        if await self._run_own_binding(event):
            return
        await super()._on_key(event)


class FieldCheckbox(_InOrder, Checkbox):
    """A yes/no field whose space/enter toggle applies in order."""

    async def _on_key(self, event: events.Key) -> None:
        await self._run_own_binding(event)


class FieldOptionList(_InOrder, OptionList):
    """A list whose moves (arrows, home/end, pages) apply in the order typed: an Enter typed
    right after them chooses the entry they reached."""

    async def _on_key(self, event: events.Key) -> None:
        if await self._run_own_binding(event):
            return
        await super()._on_key(event)


def after_typed(widgets: Sequence[Widget], callback: Callable[[], Any]) -> None:
    """Run ``callback`` once each of ``widgets`` has handled the keys already routed to it.

    A key that submits a form (Enter) is acted on by the app as it arrives, while the characters
    typed just before it may still wait in a field's queue: reading the field then would miss
    them. This queues the callback behind them, field after field (``call_later`` joins each
    widget's own queue), so the form is read only when everything typed before the Enter is in.
    """
    if not widgets:
        callback()
        return
    widgets[0].call_later(after_typed, widgets[1:], callback)
