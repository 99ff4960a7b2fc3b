"""A Ctrl-C that the interpreter would lose is delivered again.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be. When that is inside
a callback the interpreter runs for itself (a weakref callback, a ``__del__``, a garbage
collection: the import system's module-lock callback runs at any collection), the exception
cannot propagate: the interpreter reports it to ``sys.unraisablehook`` ("Exception ignored
in ...") and carries on, and the responder's Ctrl-C is gone (a drill would build to the end
and exit 0). :func:`install` wraps that hook: a lost ``KeyboardInterrupt`` is not printed but
raised again in the main thread a moment later, outside the callback, where the command turns
it into one line and exit 130. Every other unraisable exception goes to the previous hook.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

REDELIVER_AFTER_S = 0.01


def install() -> None:
    """Wrap ``sys.unraisablehook`` (once per process)."""
    if getattr(sys.unraisablehook, "_redelivers_interrupts", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is KeyboardInterrupt:
            redeliver()
            return
        previous(unraisable)

    hook._redelivers_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def redeliver() -> None:
    """Simulate the Ctrl-C again in the main thread, from a short-lived timer thread (the
    callback that swallowed it has returned by then)."""
    import _thread
    import signal

    timer = threading.Timer(REDELIVER_AFTER_S, _thread.interrupt_main, args=(signal.SIGINT,))
    timer.daemon = True
    timer.start()
