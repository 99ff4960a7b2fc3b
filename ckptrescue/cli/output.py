"""stdout is data, stderr is diagnostics: small helpers shared by every command module.

Text for a person goes through :func:`ckptrescue.display.shown_text` here (names from the
evidence are shown, never obeyed); JSON escapes every control and non-ASCII character itself.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ckptrescue.display import Shown, shown_text


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (the stable, documented shapes)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def say(text: str = "") -> None:
    """Human-readable output on stdout (when not ``--json``)."""
    sys.stdout.write(shown_text(text) + "\n")


def info(text: str) -> None:
    """Diagnostics and progress on stderr."""
    sys.stderr.write(shown_text(text) + "\n")
    sys.stderr.flush()


_INTERRUPT = {"said": False}


def interrupted(text: str) -> None:
    """Ctrl-C: what the command kept and left attached, said by the command that knows (then
    ``cli/main.py`` adds nothing; without it, main says only "interrupted")."""
    info(text)
    _INTERRUPT["said"] = True


def interrupt_said(reset: bool = False) -> bool:
    said = _INTERRUPT["said"]
    if reset:
        _INTERRUPT["said"] = False
    return said


def show(shown: Shown, *, json: bool, data: Any = None) -> int:
    """Print what a wing's renderer made of a step (``data`` as JSON instead of its lines and
    asides with ``--json``; its notes on stderr either way) and return its exit code."""
    if json:
        emit_json(data)
    else:
        for line in shown.lines:
            say(line)
        for aside in shown.asides:
            info(aside)
    for note in shown.notes:
        info(note)
    return shown.exit_code
