"""Helpers shared by the action modules (not an action module itself)."""

from __future__ import annotations

from typing import Any


def progress_adapter(progress: Any) -> Any:
    """Turn the libraries' various progress callbacks into ``progress(done, total)``."""
    def callback(*args: Any, **kw: Any) -> None:
        done = kw.get("done", args[0] if args else 0)
        total = kw.get("total", args[1] if len(args) > 1 else None)
        try:
            progress(float(done), float(total) if isinstance(total, int | float) else None)
        except (TypeError, ValueError):
            pass
    return callback
