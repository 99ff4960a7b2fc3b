"""Object-store URLs (pure): ``s3://bucket/key``, ``az://account/container/blob`` (or
``https://ACCOUNT.blob.core.windows.net/container/blob``) and ``gs://bucket/object``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ckptrescue.errors import UsageError

SCHEMES = ("s3", "az", "gs")
_AZURE_HOST = re.compile(r"^(?P<account>[a-z0-9]{3,24})\.blob\.core\.windows\.net$")


@dataclass(frozen=True)
class StoreUrl:
    """One object or prefix in one store. ``account`` is Azure's storage account ('' otherwise);
    ``bucket`` is the S3/GCS bucket or the Azure container."""

    scheme: str
    bucket: str
    key: str = ""
    account: str = ""

    def __str__(self) -> str:
        return self.child(self.key)

    def child(self, key: str) -> str:
        if self.scheme == "az":
            return f"az://{self.account}/{self.bucket}/{key}"
        return f"{self.scheme}://{self.bucket}/{key}"

    @property
    def store_name(self) -> str:
        return {"s3": "S3", "az": "Azure Blob", "gs": "GCS"}[self.scheme]


def is_s3(location: object) -> bool:
    """Whether ``location`` (text or a path) names an S3 bucket or prefix (``s3://``; ``s3:/``
    as a path object spells it)."""
    return str(location).startswith(("s3://", "s3:/"))


def is_store_url(text: str) -> bool:
    """Whether ``text`` names an object store (what the CLI dispatches on)."""
    if text.startswith(tuple(f"{s}://" for s in SCHEMES)):
        return True
    host = urlsplit(text).hostname if text.startswith("https://") else None
    return bool(host and _AZURE_HOST.match(host))


def parse_store_url(url: str, *, need_key: bool = False) -> StoreUrl:
    """Split a store URL; a one-line UsageError otherwise."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise UsageError(f"{url}: not an object-store URL (expected s3://, az://, gs:// or "
                         "https://ACCOUNT.blob.core.windows.net/...)")
    if scheme == "https":
        parts = urlsplit(url)
        match = _AZURE_HOST.match(parts.hostname or "")
        if not match:
            raise UsageError(f"{url}: an https URL must be an Azure Blob URL "
                             "(https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB)")
        container, _, key = unquote(parts.path.lstrip("/")).partition("/")
        out = StoreUrl("az", container, key, match.group("account"))
    elif scheme == "az":
        account, _, path = rest.partition("/")
        container, _, key = path.partition("/")
        if not account:
            raise UsageError(f"{url}: no storage account (expected az://ACCOUNT/CONTAINER/BLOB)")
        out = StoreUrl("az", container, key, account)
    elif scheme in ("s3", "gs"):
        bucket, _, key = rest.partition("/")
        out = StoreUrl(scheme, bucket, key)
    else:
        raise UsageError(f"{url}: unknown scheme {scheme!r} (expected s3, az, gs)")
    if not out.bucket:
        what = "container" if out.scheme == "az" else "bucket"
        raise UsageError(f"{url}: no {what} name")
    if need_key and not out.key:
        raise UsageError(f"{url}: no object name")
    return out
