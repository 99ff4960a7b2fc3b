"""Built-in engine actions, registered in one place.

Each module in this package, and the ``actions`` module of each wing named in :data:`WINGS`
(``ckptrescue/checkpoints/actions/``), defines ``ACTIONS``: classes derived from
:class:`ckptrescue.engine.action.Action`. :func:`registry` collects them by name. Playbooks,
the CLI and the TUI refer to actions only by these names — never to shell text.

:data:`ACTIONS` is the same registry read lazily: looking one name up imports only the module
:data:`HOMES` names for it (a command runs without importing every wing); iterating it, or a
name :data:`HOMES` does not place, reads them all. ``tests/contracts/test_action_homes.py``
keeps :data:`HOMES` true to :func:`registry`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Iterator, Mapping
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


# where each action is defined (below ``ckptrescue``): a hint for speed only, checked by a test
HOMES: dict[str, str] = {
    **dict.fromkeys(("case.verify", "collect.logs", "confirm", "exec"), "actions.basic"),
    "drill.load": "actions.drill",
    "report": "actions.reporting",
    **dict.fromkeys(("probe", "rank", "salvage"), "checkpoints.actions.verify"),
    **dict.fromkeys(("resume.keys", "resume.reassemble", "resume.replicas",
                     "resume.safe_globals", "resume.world_size"), "checkpoints.actions.resume"),
    **dict.fromkeys(("dataset.compare", "dataset.profile", "trainstate"),
                    "datasets.actions.analysis"),
    **dict.fromkeys(("dataset.quarantine", "gate"), "datasets.actions.preload"),
    **dict.fromkeys(("dataset.verify", "manifest.audit", "manifest.build", "manifest.diff",
                     "manifest.update"), "datasets.actions.manifests"),
    "hub.verify": "datasets.actions.hub",
    "recover": "datasets.actions.recovery",
    "watch.pass": "datasets.actions.watch",
    **dict.fromkeys(("copy", "extract", "fs.inspect", "image", "locate", "mount", "triage",
                     "umount"), "storage.actions.verbs"),
    "device.health": "storage.actions.health",
    **dict.fromkeys([f"{kind}.{verb}" for kind in ("s3", "store") for verb in
                     ("history", "preflight", "preserve", "restore", "verify")],
                    "stores.actions"),
}


def _placed(name: str) -> type[Action] | None:
    """The action ``name`` from the module :data:`HOMES` places it in (None: not there)."""
    home = HOMES.get(name)
    if home is None:
        return None
    module = importlib.import_module(f"{__name__.rpartition('.')[0]}.{home}")
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
