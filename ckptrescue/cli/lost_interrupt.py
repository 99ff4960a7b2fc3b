"""A Ctrl-C that the interpreter would lose is delivered again.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be. When that is inside
a callback the interpreter runs for itself (a weakref callback, a ``__del__``, a garbage
collection: the import system's module-lock callback runs at any collection), the exception
cannot propagate: the interpreter reports it to ``sys.unraisablehook`` ("Exception ignored
in ...") and carries on, and the responder's Ctrl-C is gone (a drill would build to the end
and exit 0). :func:`install` wraps that hook: a lost ``KeyboardInterrupt`` is not printed but
raised again in the main thread a moment later, outside the callback, where the command turns
it into one line and exit 130. Every other unraisable exception goes to the previous hook.

A Ctrl-C can also be swallowed without a trace: by a library's ``except BaseException: pass``,
or by C code that clears whatever error a Python callback raised. :func:`install` therefore
also counts every Ctrl-C as it arrives (Python's own handler, counted: :func:`arrived`), so
that a command that ran on to its end can still tell that one came, and end as interrupted
(``cli/main.run``; the drill removes what it built, as for any Ctrl-C).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

REDELIVER_AFTER_S = 0.01


_ARRIVED = [0]


def arrived() -> int:
    """How many Ctrl-Cs have arrived since :func:`install` (whatever became of them)."""
    return _ARRIVED[0]


def _on_sigint(signum: int, frame: Any) -> None:
    """Python's own SIGINT handler (``KeyboardInterrupt``), counted first."""
    _ARRIVED[0] += 1
    raise KeyboardInterrupt


def install() -> None:
    """Count every Ctrl-C (where SIGINT has Python's own handler) and wrap
    ``sys.unraisablehook`` (once per process)."""
    import signal

    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    if getattr(sys.unraisablehook, "_redelivers_interrupts", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        # a Ctrl-C is raised in the main thread only: another thread's KeyboardInterrupt is
        # its own code's, and stays where it was
        if unraisable.exc_type is KeyboardInterrupt \
                and threading.current_thread() is threading.main_thread():
            redeliver()
            return
        previous(unraisable)

    hook._redelivers_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def redeliver() -> None:
    """Send the Ctrl-C again to the main thread, from a short-lived timer thread (the callback
    that swallowed it has returned by then). A real SIGINT, so that a main thread blocked in a
    sleep, a join or a select wakes up (``_thread.interrupt_main`` only marks the signal
    pending until the blocking call returns); that only where SIGINT has a Python handler."""
    timer = threading.Timer(REDELIVER_AFTER_S, _send_sigint)
    timer.daemon = True
    timer.start()


def _send_sigint() -> None:
    import signal

    if callable(signal.getsignal(signal.SIGINT)):  # ignored or default since: nothing to do
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
