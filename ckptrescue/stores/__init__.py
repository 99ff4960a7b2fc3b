"""Object stores (S3, Azure Blob, GCS), read-only: probe in place through a FUSE view served by
ranged GETs, integrity against the stores' own checksums, version history with last known-good,
preflight of the protection settings, preserve into and restore into a local folder.

    from ckptrescue.stores import open_view, open_store, StoreOptions
    with open_view("gs://bucket/run/step-100/") as view:
        reports = probe_paths([view.path])
        record = view.settle()        # bytes of how many objects were read, in how many GETs

See docs/stores.md.
"""

from ckptrescue.stores.base import ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.urls import StoreUrl, is_store_url, parse_store_url
from ckptrescue.stores.view import StoreView, open_view

__all__ = ["ObjectInfo", "Store", "StoreOptions", "StoreUrl", "StoreView", "is_store_url",
           "open_store", "open_view", "parse_store_url"]
