"""Built-in engine actions, registered in one place.

Each module in this package, and the ``actions`` module of each wing named in :data:`WINGS`
(``ckptrescue/checkpoints/actions/``), defines ``ACTIONS``: classes derived from
:class:`ckptrescue.engine.action.Action`. :func:`registry` collects them by name. Playbooks,
the CLI and the TUI refer to actions only by these names — never to shell text.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckptrescue.engine.action import Action


# the wings that own their actions: ``ckptrescue.<wing>.actions`` (a module or a package of them)
WINGS = ("checkpoints", "datasets", "storage", "stores")


def action_modules() -> list[str]:
    """The modules :func:`registry` reads, in order: this package's, then each wing's."""
    names = [f"{__name__}.{info.name}" for info in sorted(pkgutil.iter_modules(__path__),
                                                           key=lambda i: i.name)]
    root = __name__.rpartition(".")[0]
    for wing in WINGS:
        if importlib.util.find_spec(f"{root}.{wing}.actions") is None:
            continue
        module = importlib.import_module(f"{root}.{wing}.actions")
        names.append(module.__name__)
        names += [f"{module.__name__}.{info.name}" for info in sorted(
            pkgutil.iter_modules(getattr(module, "__path__", [])), key=lambda i: i.name)]
    return names


@cache
def registry() -> dict[str, type[Action]]:
    found: dict[str, type[Action]] = {}
    for name in action_modules():
        module = importlib.import_module(name)
        for cls in getattr(module, "ACTIONS", []):
            if cls.name in found:
                raise RuntimeError(f"action {cls.name} registered twice")
            found[cls.name] = cls
    return dict(sorted(found.items()))
