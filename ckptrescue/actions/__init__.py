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
import os
import re
from collections.abc import Iterator, Mapping
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckptrescue.engine.action import Action


# the wings that own their actions: ``ckptrescue.<wing>.actions`` (a module or a package of them)
WINGS = ("checkpoints", "datasets", "storage", "stores")


def action_modules() -> list[str]:
    """The modules :func:`registry` reads, in order: this package's, then each wing's."""
    return [name for name, _ in _module_files()]


@cache
def _module_files() -> tuple[tuple[str, str], ...]:
    """(module, source file) of :func:`action_modules`, found by listing the package folders
    (nothing imported; the import system's search costs a command's start about 5 ms)."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = __name__.rpartition(".")[0]
    found = _listed(__name__, here)
    for wing in WINGS:
        folder = os.path.join(os.path.dirname(here), wing, "actions")
        if os.path.isfile(folder + ".py"):
            found.append((f"{root}.{wing}.actions", folder + ".py"))
        elif os.path.isfile(os.path.join(folder, "__init__.py")):
            found.append((f"{root}.{wing}.actions", os.path.join(folder, "__init__.py")))
            found += _listed(f"{root}.{wing}.actions", folder)
    return tuple(found)


def _listed(package: str, folder: str) -> list[tuple[str, str]]:
    """The modules in ``folder`` (the package ``package``), by name, as ``pkgutil`` lists them:
    ``name.py`` files and folders with an ``__init__.py``."""
    found = []
    for entry in os.scandir(folder):
        if entry.name.endswith(".py") and entry.name != "__init__.py" and entry.is_file():
            found.append((entry.name[:-3], entry.path))
        elif entry.is_dir() and entry.name.isidentifier() \
                and os.path.isfile(os.path.join(entry.path, "__init__.py")):
            found.append((entry.name, os.path.join(entry.path, "__init__.py")))
    return [(f"{package}.{name}", path) for name, path in sorted(found)]


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
    for module, path in _module_files():
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
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
