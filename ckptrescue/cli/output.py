"""stdout is data, stderr is diagnostics: small helpers shared by every command module."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (the stable, documented shapes)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def say(text: str = "") -> None:
    """Human-readable output on stdout (when not ``--json``)."""
    sys.stdout.write(text + "\n")


def info(text: str) -> None:
    """Diagnostics and progress on stderr."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
