"""Typer CLI adapter: one module per command group, wired in ``main.py``.

Started as the ``ckptrescue`` program, a Ctrl-C that arrives while the command modules are
still being imported (before ``main.run`` can turn it into one line) ends the program with
``ckptrescue: interrupted`` and exit 130, never a traceback; ``main.run`` puts Python's own
handler back before any command runs.
"""

import os as _os
import signal as _signal
import sys as _sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    _os.write(2, b"\nckptrescue: interrupted\n")
    _os._exit(130)  # nothing has started: nothing to release


if _os.path.basename(_sys.argv[0] if _sys.argv else "") in ("ckptrescue", "__main__.py") \
        and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)
