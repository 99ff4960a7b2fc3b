"""Helpers shared by the action modules (not an action module itself)."""

from __future__ import annotations

from typing import Any

from ckptrescue.action import ActionResult, findings_of, to_outputs
from ckptrescue.model import Severity


def from_library(result: Any, summary: str = "", *, status: str | None = None) -> ActionResult:
    """Wrap a library result whose findings the library already recorded in the case."""
    findings = findings_of(result)
    if status is None:
        serious = any(f.severity.rank >= Severity.WARNING.rank for f in findings)
        status = "findings" if serious else "ok"
    return ActionResult(status=status, outputs=to_outputs(result), findings=findings,
                        summary=summary, findings_recorded=True)


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
