"""The dataset wing's step outputs (``docs/step-outputs.md`` is generated from them), one
module per module of actions (``datasets/actions/``): ``manifests`` (manifest build, audit,
update, diff; dataset verify), ``preload`` (quarantine, the gate), ``analysis`` (training
state, profiles, comparisons), ``recovery``, ``hub`` and ``watch``.

``from ckptrescue.datasets.outputs import X`` imports X's module alone: each record class costs
its dataclass methods' compilation at import (about half a millisecond), and a command needs
the records of its own actions, not the thirteen. A record's ``__module__`` is its family
module; a case's ``output_modules`` name it, a reader takes every module under this package
as the dataset domain (``engine.case_outputs.in_domain``), and asks for a family's module
(:func:`module_of`) before it imports that family's records.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "DatasetCompareOutput": "analysis",
    "DatasetProfileOutput": "analysis",
    "DatasetVerifyOutput": "manifests",
    "GateOutput": "preload",
    "HubCacheOutput": "hub",
    "ManifestAuditOutput": "manifests",
    "ManifestBuildOutput": "manifests",
    "ManifestDiffOutput": "manifests",
    "ManifestUpdateOutput": "manifests",
    "QuarantineOutput": "preload",
    "RecoverOutput": "recovery",
    "TrainStateOutput": "analysis",
    "WatchPassOutput": "watch",
}

__all__ = sorted(_HOMES)


def module_of(name: str) -> str:
    """The module that defines the record class ``name``, without importing it: what a reader
    asks ``engine.case_outputs.domains_held`` before it imports the class."""
    return f"{__name__}.{_HOMES[name]}"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
