"""Plugin discovery: the modules of a plugin package (checkpoint formats, families,
filesystems, finding codes), found by listing the package rather than by import statements."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection
from types import ModuleType


def plugin_modules(package: ModuleType, *, skip: Collection[str] = (),
                   broken: dict[str, str] | None = None) -> list[ModuleType]:
    """The modules of ``package`` in name order, leaving out private ones (``_name``) and
    ``skip``. With ``broken``, a module that fails to import is recorded there (name -> error)
    and passed over, so that one broken plugin does not stop the others; without, the error
    propagates."""
    found: list[ModuleType] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name in skip:
            continue
        try:
            found.append(importlib.import_module(f"{package.__name__}.{info.name}"))
        except Exception as exc:  # noqa: BLE001 - recorded, or raised again
            if broken is None:
                raise
            broken[info.name] = f"{type(exc).__name__}: {exc}"
    return found
