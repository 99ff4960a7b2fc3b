"""Type-ahead across a screen change: keys typed while the next screen is on its way wait for it.

A fast typist's burst reaches the app before it has handled the first key. When a key decides to
change the screen (Enter that creates the case, chooses the playbook, opens the plan), the keys
typed after it would be routed to the screen that is going away -- the focused field there, or
nothing -- and be lost. A screen that is about to change the screen calls ``hold_keys()`` as that
key is handled (a priority binding); from then on the app keeps every key it receives, in order,
and hands them on once the new screen is mounted and has its focus (``release_keys()``, also
called by the screen when nothing changed after all, e.g. the form had an error). Ctrl+Q and
Ctrl+C are never held. If no screen comes within ``HOLD_MAX_S`` the keys go to whatever screen
is current then: a key is delayed, never dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import events

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.timer import Timer

HOLD_MAX_S = 3.0      # keys wait at most this long for the next screen
POLL_S = 0.02         # how often the app looks whether the next screen is ready
NEVER_HELD = frozenset({"ctrl+q", "ctrl+c"})


class TypeAhead:
    """Mixin for the Textual ``App``: holds keys across a pending screen change."""

    _held: list[events.Key] | None = None
    _held_from: Screen[Any] | None = None
    _hold_timer: Timer | None = None
    _hold_waited: float = 0.0
    _hold_gen: int = 0       # which hold a scheduled release belongs to
    _releasing: bool = False

    def hold_keys(self) -> None:
        """Keep the keys received from now on until the next screen is ready (or
        ``release_keys``)."""
        app: Any = self
        if self._held is not None:
            return
        self._held = []
        self._held_from = app.screen
        self._hold_waited = 0.0
        self._hold_gen += 1
        self._releasing = False
        self._hold_timer = app.set_interval(POLL_S, self._poll_next_screen)

    def release_keys(self) -> None:
        """Hand the held keys on, in order, to the current screen: behind what the app has
        queued already (the new screen's focus), and holding until then, so that no key
        received meanwhile overtakes them."""
        app: Any = self
        if self._held is None or self._releasing:
            return
        self._releasing = True
        app.call_later(self._dispatch_held, self._hold_gen)
        if self._hold_timer is not None:
            self._hold_timer.stop()
            self._hold_timer = None

    async def _dispatch_held(self, gen: int) -> None:
        if gen != self._hold_gen or self._held is None:
            return
        held, self._held = self._held, None
        self._releasing = False
        self._held_from = None
        while held:
            key = held.pop(0)
            if self._held is not None:  # a held key asked for the next screen change: the rest
                self._held.extend([key, *held])  # wait for that one
                return
            await self._handle_key_now(key)

    async def _handle_key_now(self, key: events.Key) -> None:
        await super().on_event(key)  # type: ignore[misc]

    def _next_screen_ready(self) -> bool:
        app: Any = self
        screen = app.screen
        if screen is self._held_from or not screen.is_mounted:
            return False
        return screen.focused is not None or not screen.focus_chain

    def _poll_next_screen(self) -> None:
        self._hold_waited += POLL_S
        if self._next_screen_ready() or self._hold_waited >= HOLD_MAX_S:
            self.release_keys()

    async def on_event(self, event: events.Event) -> None:
        if (self._held is not None and isinstance(event, events.Key)
                and not event.is_forwarded and event.key not in NEVER_HELD):
            self._held.append(event)
            return
        await super().on_event(event)  # type: ignore[misc]
