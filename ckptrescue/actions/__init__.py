"""Built-in engine actions, registered in one place.

Each module in this package, and the ``actions`` module of each wing named in :data:`WINGS`
(``ckptrescue/checkpoints/actions/``), defines ``ACTIONS``: classes derived from
:class:`ckptrescue.engine.action.Action`. :func:`registry` collects them by name. Playbooks,
the CLI and the TUI refer to actions only by these names — never to shell text.

:data:`ACTIONS` is the same registry read lazily: looking one name up imports only the module
that defines it (:func:`homes`, read from the modules' source), so a command runs without
importing every wing; iterating it, or a name not found that way, reads them all.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
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
        spec = importlib.util.find_spec(f"{root}.{wing}.actions")  # found, not imported
        if spec is None:
            continue
        names.append(spec.name)
        names += [f"{spec.name}.{info.name}" for info in sorted(
            pkgutil.iter_modules(spec.submodule_search_locations or []), key=lambda i: i.name)]
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


_NAME = re.compile(r'^ {4}name = "([^"]+)"$', re.MULTILINE)


@cache
def homes() -> dict[str, str]:
    """Where each action is defined, read from the source of :func:`action_modules` (an
    action class's ``name = "..."``) without importing them: a lookup then imports one module.
    A name read wrongly costs only speed (:data:`ACTIONS` falls back to :func:`registry`)."""
    found: dict[str, str] = {}
    for module in action_modules():
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        try:
            text = Path(spec.origin).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for name in _NAME.findall(text):
            found.setdefault(name, module)
    return found


def _placed(name: str) -> type[Action] | None:
    """The action ``name`` from the module :func:`homes` places it in (None: not there)."""
    home = homes().get(name)
    if home is None:
        return None
    module = importlib.import_module(home)
    return next((cls for cls in getattr(module, "ACTIONS", []) if cls.name == name), None)


class LazyActions(Mapping[str, "type[Action]"]):
    """:func:`registry` as a mapping that imports only what a lookup needs."""

    def __getitem__(self, name: str) -> type[Action]:
        return _placed(name) or registry()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(registry())

    def __len__(self) -> int:
        return len(registry())


ACTIONS = LazyActions()
