"""The store abstraction: what every backend (S3, Azure Blob, GCS) offers the kit, read-only.

A :class:`Store` lists objects and their versions, reads an object's metadata, reads byte ranges
of one pinned version, and streams whole versions. It has no method that writes, and each backend
builds its SDK client so that every request passes one choke point that refuses anything outside
the backend's ``READ_OPERATIONS`` before it is sent (S3: ``ckptrescue.stores.s3.client.make_client``;
Azure: :class:`ckptrescue.stores.azure.ReadOnlyTransport`; GCS:
:class:`ckptrescue.stores.gcs.ReadOnlySession`). The choke point also counts the operations.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ckptrescue.stores.urls import StoreUrl, parse_store_url

MiB = 1 << 20


@dataclass(frozen=True)
class StoreOptions:
    """How to reach a store and how to read it. ``None`` = the backend's default (see
    :data:`TUNING`) or the SDK's usual environment.

    ``endpoint_url`` overrides the service endpoint (emulators); the env vars
    ``CKPTRESCUE_S3_ENDPOINT`` / ``AWS_ENDPOINT_URL``, ``CKPTRESCUE_AZURE_BLOB_ENDPOINT`` and
    ``CKPTRESCUE_GCS_ENDPOINT`` / ``STORAGE_EMULATOR_HOST`` do the same.
    """

    endpoint_url: str | None = None
    profile: str | None = None  # S3
    region: str | None = None  # S3
    checksum_when: str = "supported"  # S3
    concurrency: int | None = None  # parallel ranged GETs per store
    block_size: int | None = None  # bytes per ranged GET
    readahead: int | None = None  # blocks fetched ahead of a sequential reader
    cache_blocks: int | None = None  # blocks kept per object (LRU; first and last pinned)


@dataclass(frozen=True)
class Tuning:
    concurrency: int
    block_size: int
    readahead: int


# Per store: S3 and GCS serve large ranges at full speed per connection (8 MiB ranges are what
# the AWS CLI and gcloud use); Azure computes a range MD5 only up to 4 MiB, so its blocks are
# 4 MiB and read further ahead.
TUNING: dict[str, Tuning] = {
    "s3": Tuning(concurrency=8, block_size=8 * MiB, readahead=4),
    "az": Tuning(concurrency=8, block_size=4 * MiB, readahead=8),
    "gs": Tuning(concurrency=8, block_size=8 * MiB, readahead=4),
}


def tuning(scheme: str, options: StoreOptions) -> Tuning:
    base = TUNING[scheme]
    return Tuning(concurrency=max(1, options.concurrency or base.concurrency),
                  block_size=max(64 * 1024, options.block_size or base.block_size),
                  readahead=max(0, base.readahead if options.readahead is None
                                else options.readahead))


@dataclass
class ObjectInfo:
    """One object version as the store describes it. ``version`` pins the exact bytes (S3
    VersionId, Azure snapshot/version id, GCS generation); ``hashes`` holds the stored values
    the store returned, Base64 as the store gives them (``md5``, ``crc32c``, ``crc64``)."""

    key: str
    size: int
    version: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    hashes: dict[str, str] = field(default_factory=dict)
    is_latest: bool = True
    deleted: bool = False  # a noncurrent/deleted version (GCS timeDeleted, Azure soft delete)
    soft_deleted: bool = False  # listed from the soft-delete area: listed, never undeleted
    kind: str = "version"  # version | snapshot | soft-deleted | delete-marker
    composite: bool = False  # GCS composite object (no md5Hash)
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "size": self.size, "version": self.version, "etag": self.etag,
                "last_modified": self.last_modified, "hashes": dict(self.hashes),
                "is_latest": self.is_latest, "deleted": self.deleted,
                "soft_deleted": self.soft_deleted, "kind": self.kind,
                "composite": self.composite, "details": self.details}


@dataclass
class StoreStats:
    """Operations sent through a store's choke point, and operations refused there."""

    operations: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, operation: str) -> None:
        with self._lock:
            self.operations[operation] += 1

    def refuse(self, operation: str) -> None:
        with self._lock:
            self.refused[operation] += 1


class Store(ABC):
    """A read-only object store (one bucket/container). Subclasses implement the reads."""

    scheme: ClassVar[str]
    READ_OPERATIONS: ClassVar[frozenset[str]]

    def __init__(self, url: StoreUrl, options: StoreOptions) -> None:
        self.url = url
        self.options = options
        self.tuning = tuning(url.scheme, options)
        self.stats = StoreStats()

    def url_of(self, key: str, version: str | None = None) -> str:
        out = self.url.child(key)
        return f"{out}?version={version}" if version else out

    @abstractmethod
    def head(self, key: str, version: str | None = None) -> ObjectInfo:
        """The current (or given) version of ``key``; RemoteError/UsageError when unreadable."""

    @abstractmethod
    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Current objects whose key starts with ``prefix``, sorted by key."""

    @abstractmethod
    def list_versions(self, prefix: str) -> dict[str, list[ObjectInfo]]:
        """Every listed version of every key under ``prefix``, newest first per key
        (noncurrent, snapshots, soft-deleted included and marked)."""

    @abstractmethod
    def read_range(self, obj: ObjectInfo, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` of exactly that version (pinned by version/ETag)."""

    @abstractmethod
    def iter_content(self, obj: ObjectInfo, chunk: int = 8 * MiB) -> Iterator[bytes]:
        """The whole version's bytes, in order."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """Protection settings of the bucket/container (for preflight), as read."""

    def resolve(self) -> tuple[str, list[ObjectInfo], bool]:
        """The URL's key as an exact object (``(parent, [obj], True)``) when one exists, else
        every object under it as a folder (``(prefix, objs, False)``)."""
        key = self.url.key
        if key and not key.endswith("/"):
            exact = [o for o in self.list_objects(key) if o.key == key]
            if exact:
                return key.rsplit("/", 1)[0] + "/" if "/" in key else "", exact, True
            key += "/"
        return key, self.list_objects(key), False


def open_store(url: str | StoreUrl, options: StoreOptions | None = None) -> Store:
    """The read-only store for ``url`` (bucket/container level; the key is kept on ``.url``)."""
    target = parse_store_url(url) if isinstance(url, str) else url
    options = options or StoreOptions()
    if target.scheme == "s3":
        from ckptrescue.stores.s3.backend import S3Store

        return S3Store(target, options)
    if target.scheme == "az":
        from ckptrescue.stores.azure import AzureStore

        return AzureStore(target, options)
    from ckptrescue.stores.gcs import GcsStore

    return GcsStore(target, options)
