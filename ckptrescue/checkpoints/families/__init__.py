"""Multi-rank checkpoint families (DeepSpeed, Megatron/NeMo, FSDP/DCP, Lightning, Accelerate,
Orbax): one step = many rank files + metadata, verified as a whole (``families/base.py``).

:func:`families` is the registry: every module of this package whose name does not start with
``_`` may define ``FAMILIES = [cls, ...]``; they are returned sorted by ``priority``. A module
that fails to import is skipped and recorded in :data:`SKIPPED_FAMILY_MODULES` (the others keep
working). ``formats/families.py`` registers them as checkpoint formats.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue.plugins import plugin_modules

if TYPE_CHECKING:
    from ckptrescue.checkpoints.families.base import Family

SKIPPED_FAMILY_MODULES: dict[str, str] = {}


@functools.cache
def _discover() -> tuple[type[Family], ...]:
    package = sys.modules[__name__]
    found: list[type[Family]] = [
        family for module in plugin_modules(package, skip={"base"}, broken=SKIPPED_FAMILY_MODULES)
        for family in getattr(module, "FAMILIES", [])]
    found.sort(key=lambda f: getattr(f, "priority", 5))
    return tuple(found)


def families() -> list[type[Family]]:
    """Every registered family, sorted by priority (lazy discovery, cached)."""
    return list(_discover())


def by_name(name: str) -> type[Family] | None:
    """The family whose ``name`` (the ``format`` in probe JSON) is ``name``."""
    return next((f for f in _discover() if f.name == name), None)


def detecting(step: Path) -> type[Family] | None:
    """The first family (by priority) that takes ``step`` as one of its steps; a family that
    cannot read it (``OSError``) is passed over. None: no family does."""
    from ckptrescue.checkpoints.base import first_detecting

    return first_detecting(_discover(), step, passing=(OSError,))
