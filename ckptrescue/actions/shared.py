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


def refuse_unsafe_output(case: Any, target: str) -> None:
    """An output the kit writes itself (a list, a profile, a state file, a restored copy) must
    pass the guard's identity rules like every tool output: never evidence, the case's own
    records, a device or a system tree."""
    from ckptrescue.effects.output_dirs import refuse_aliasing

    refuse_aliasing(target, evidence=case.evidence_paths(), protected=case.protected_paths())
