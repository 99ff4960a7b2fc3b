"""Built-in engine actions, registered in one place.

Each module in this package defines ``ACTIONS``: classes derived from
:class:`ckptrescue.engine.action.Action`. :func:`registry` collects them by name. Playbooks, the CLI
and the TUI refer to actions only by these names — never to shell text.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckptrescue.engine.action import Action


@cache
def registry() -> dict[str, type[Action]]:
    found: dict[str, type[Action]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for cls in getattr(module, "ACTIONS", []):
            if cls.name in found:
                raise RuntimeError(f"action {cls.name} registered twice")
            found[cls.name] = cls
    return dict(sorted(found.items()))
