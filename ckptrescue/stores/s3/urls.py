"""``s3://bucket/key`` parsing (pure): an object-store URL (``stores/urls.py``) that must be S3."""

from __future__ import annotations

from ckptrescue.errors import UsageError
from ckptrescue.stores.urls import StoreUrl, parse_store_url

S3Url = StoreUrl


def parse_s3_url(url: str, *, need_key: bool = False) -> StoreUrl:
    """Split ``s3://BUCKET[/KEY_OR_PREFIX]``; a one-line UsageError otherwise."""
    if not url.startswith("s3://"):
        raise UsageError(f"{url}: not an s3:// URL (expected s3://BUCKET/KEY)")
    out = parse_store_url(url)
    if need_key and not out.key:
        raise UsageError(f"{url}: no object key (expected s3://BUCKET/KEY)")
    return out
