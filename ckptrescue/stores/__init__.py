"""Object stores (S3, Azure Blob, GCS), read-only, behind one :class:`~ckptrescue.stores.base.Store`
interface: verify against the stores' own checksums, version history with the last known-good,
preflight of the protection settings, preserve into a local folder or the case, restore into a
recovery folder, and probe in place through a FUSE view served by ranged GETs — each written
once (``verify.py``, ``history.py``, ``preflight.py``, ``preserve.py``, ``restore.py``,
``view.py``), with what only one store can do as a backend hook (``s3/backend.py``,
``azure.py``, ``gcs.py``). The wing's actions, step records and text: ``actions.py``,
``outputs.py``, ``render.py``.

    from ckptrescue.stores import open_view, open_store, StoreOptions
    with open_view("gs://bucket/run/step-100/") as view:
        reports = probe_paths([view.path])
        record = view.settle()        # bytes of how many objects were read, in how many GETs

The names below load when first used (the CLI imports the wing's text at start). See
docs/stores.md.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {"ObjectInfo": "base", "Store": "base", "StoreOptions": "base", "open_store": "base",
          "StoreUrl": "urls", "is_store_url": "urls", "parse_store_url": "urls",
          "StoreView": "view", "open_view": "view"}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
