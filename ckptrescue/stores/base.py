"""The store abstraction: what every backend (S3, Azure Blob, GCS) offers the kit, read-only.

A :class:`Store` lists objects and their versions, reads an object's metadata, reads byte ranges
of one pinned version, and streams whole versions. It has no method that writes, and each backend
builds its SDK client so that every request passes one choke point that refuses anything outside
the backend's ``READ_OPERATIONS`` before it is sent (S3: ``ckptrescue.stores.s3.client.make_client``;
Azure: :class:`ckptrescue.stores.azure.ReadOnlyTransport`; GCS:
:class:`ckptrescue.stores.gcs.ReadOnlySession`). The choke point also counts the operations.

Verify, history, preflight, preserve, restore and the probe-in-place view are written once, over
this interface (``stores/verify.py``, ``history.py``, ``preflight.py``, ``preserve.py``,
``restore.py``, ``view.py``). What only one store can do is a *hook* they ask for, with a
default that every store can answer: :meth:`Store.check_local` (S3: the stored checksum
recomputed with the real multipart part boundaries, no download), :meth:`Store.fetch` (S3: the
composite checksum checked as the bytes stream, mid-body resets resumed),
:meth:`Store.describe_versions` / :meth:`Store.version_anomalies` / :meth:`Store.version_json`
(S3: per-version HEADs, delete markers, null versions), :meth:`Store.stored_sha256` (S3: a
known-good version by its stored SHA-256, no download), :meth:`Store.version_events`
(S3: CloudTrail), :meth:`Store.judge` (each store's protection settings), and :data:`CODES`
(the finding codes each backend reports).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol

from ckptrescue.errors import CkptRescueError, RefusedError, RemoteError, UsageError
from ckptrescue.model import JsonObject
from ckptrescue.stores.kinds import OS_CODES
from ckptrescue.stores.outputs import VersionAnomaly
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
    concurrency: int | None = None  # parallel requests per store (ranged GETs, HEADs)
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
    the store returned, Base64 as the store gives them (``md5``, ``crc32c``, ``crc64``).
    ``native`` is the backend's own record of it (S3: the listing entry or HEAD), for its hooks;
    it is never serialised."""

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
    native: Any = field(default=None, repr=False, compare=False)

    @property
    def version_id(self) -> str:
        """The version as history lists it (``current`` when the store names none)."""
        return self.version if self.version is not None else "current"

    @property
    def delete_marker(self) -> bool:
        return self.kind == "delete-marker"

    def to_json(self) -> JsonObject:
        return {"key": self.key, "size": self.size, "version": self.version, "etag": self.etag,
                "last_modified": self.last_modified, "hashes": dict(self.hashes),
                "is_latest": self.is_latest, "deleted": self.deleted,
                "soft_deleted": self.soft_deleted, "kind": self.kind,
                "composite": self.composite, "details": self.details}


class ObjectGone(RemoteError):
    """The object (or that version of it) is not there: no such key/version, or a delete
    marker is current."""

    def __init__(self, message: str, *, delete_marker: bool = False) -> None:
        super().__init__(message)
        self.delete_marker = delete_marker


@dataclass
class Verdict:
    """Bytes compared with one object's stored values: ``match``, ``mismatch`` or
    ``unverifiable``; ``algorithm`` the strongest value compared; ``detail`` the message,
    the values and the backend's own facts (form, parts, resets...)."""

    status: str
    algorithm: str | None
    detail: dict[str, Any]


@dataclass
class Fetched(Verdict):
    """A version streamed into a sink and checked on the way: its size and SHA-256 as
    received, the object as the backend described it (``object``) and, for a multipart S3
    object, its part layout."""

    size: int = 0
    sha256: str = ""
    object: dict[str, Any] = field(default_factory=dict)
    layout: dict[str, Any] | None = None


class Protection(NamedTuple):
    """A store's protection settings judged (:meth:`Store.judge`): ``verdict`` (immutable,
    versioned, unprotected, unknown), ``warnings`` (what to tell the responder), ``unknown``
    (settings that could not be read) and ``issues``: (finding kind, title) pairs."""

    verdict: str
    warnings: list[str]
    unknown: list[str]
    issues: list[tuple[str, str]]


class Notes:
    """What a judge (:meth:`Store.judge`) finds, as it finds it."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.unknown: list[str] = []
        self.issues: list[tuple[str, str]] = []

    def warn(self, kind: str, text: str) -> None:
        self.warnings.append(text)
        self.issues.append((kind, text))

    def not_read(self, text: str) -> None:
        self.unknown.append(text)
        self.issues.append(("setting-unknown", text))

    def judged(self, verdict: str) -> Protection:
        return Protection(verdict, self.warnings, self.unknown, self.issues)


class Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class LocalWriteError(CkptRescueError):
    """Writing received bytes into the local destination failed (no space, I/O error)."""


def local_write_error(exc: OSError, dest: Any, where: str) -> LocalWriteError:
    """A write into the local destination failed: one line naming the file and the
    operation (no space left, an I/O error), not the object."""
    name = getattr(dest, "name", None)
    return LocalWriteError(
        f"{name if isinstance(name, str) else 'the destination'}: {exc.strerror or exc} while "
        f"writing the bytes of {where}",
        hint="free space on the destination's filesystem (or check the disk) and run the "
        "command again; objects already preserved are kept")


@dataclass
class OperationCounts:
    """Operations counted where they pass (thread-safe): a store's choke point, an S3 client."""

    operations: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, operation: str) -> None:
        with self._lock:
            self.operations[operation] += 1

    def count_into(self, other: OperationCounts) -> None:
        """Count from now on into ``other``'s counter, under ``other``'s lock (two choke points
        on one path, one count: an increment is never lost between two locks)."""
        self.operations, self._lock = other.operations, other._lock


@dataclass
class StoreStats(OperationCounts):
    """Operations sent through a store's choke point, and operations refused there."""

    refused: Counter[str] = field(default_factory=Counter)

    def refuse(self, operation: str) -> None:
        with self._lock:
            self.refused[operation] += 1

    def admit(self, operation: str, allowed: frozenset[str], service: str) -> None:
        """A choke point's one decision: count a read operation, or count the refusal and
        raise :class:`~ckptrescue.errors.RefusedError` before anything is sent."""
        if operation not in allowed:
            self.refuse(operation)
            raise RefusedError(f"refused {service} operation {operation}: ckptrescue never "
                               "writes to a store (read-only client)")
        self.count(operation)


class Store(ABC):
    """A read-only object store (one bucket/container). Subclasses implement the reads and
    may override the hooks (module doc)."""

    scheme: ClassVar[str]
    READ_OPERATIONS: ClassVar[frozenset[str]]
    CODES: ClassVar[dict[str, str]] = OS_CODES  # finding kind -> code (``stores/kinds.py``)
    RECORDS: ClassVar[str] = "store"  # audit records and artifacts: "store.verify", ...

    def __init__(self, url: StoreUrl, options: StoreOptions) -> None:
        self.url = url
        self.options = options
        self.tuning = tuning(url.scheme, options)
        self.stats = StoreStats()

    def url_of(self, key: str, version: str | None = None) -> str:
        out = self.url.child(key)
        return f"{out}?version={version}" if version else out

    def connection(self) -> dict[str, Any]:
        """How the store was reached (for the audit record)."""
        return {"endpoint_url": self.options.endpoint_url}

    # ---- reads every backend implements ----------------------------------------------------

    @abstractmethod
    def head(self, key: str, version: str | None = None) -> ObjectInfo:
        """The current (or given) version of ``key``; RemoteError/UsageError when unreadable."""

    @abstractmethod
    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Current objects whose key starts with ``prefix``, sorted by key."""

    @abstractmethod
    def list_versions(self, prefix: str) -> dict[str, list[ObjectInfo]]:
        """Every listed version of every key under ``prefix``, newest first per key
        (noncurrent, snapshots, soft-deleted, delete markers included and marked)."""

    @abstractmethod
    def read_range(self, obj: ObjectInfo, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` of exactly that version (pinned by version/ETag)."""

    @abstractmethod
    def iter_content(self, obj: ObjectInfo, chunk: int = 8 * MiB) -> Iterator[bytes]:
        """The whole version's bytes, in order."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """Protection settings of the bucket/container (for preflight), as read."""

    @abstractmethod
    def judge(self, settings: dict[str, Any]) -> Protection:
        """What :meth:`settings` means for the evidence (pure)."""

    # ---- listing -------------------------------------------------------------------------

    def iter_listing(self, prefix: str) -> Iterator[list[ObjectInfo]]:
        """Current objects under ``prefix`` page by page (work can start on the first page)."""
        yield self.list_objects(prefix)

    def find(self, key: str) -> ObjectInfo | None:
        """The current object named exactly ``key``, if there is one (listed, not read)."""
        return next((o for o in self.list_objects(key) if o.key == key), None)

    def select(self) -> tuple[str, ObjectInfo | None]:
        """What the URL names: ``(parent, obj)`` when its key is an existing object, else
        ``(prefix, None)``: every object under the key taken as a folder."""
        key = self.url.key
        if key and not key.endswith("/"):
            exact = self.find(key)
            if exact is not None:
                return (key.rsplit("/", 1)[0] + "/" if "/" in key else ""), exact
            key += "/"
        return key, None

    def resolve(self) -> tuple[str, list[ObjectInfo], bool]:
        """The URL's key as an exact object (``(parent, [obj], True)``) when one exists, else
        every object under it as a folder (``(prefix, objs, False)``)."""
        prefix, exact = self.select()
        if exact is not None:
            return prefix, [exact], True
        return prefix, self.list_objects(prefix), False

    # ---- hooks (defaults every store answers; a backend overrides what it does better) ----

    def check_local(self, obj: ObjectInfo, path: Path) -> Verdict:
        """A local file against the object's stored values, downloading nothing."""
        from ckptrescue.stores.integrity import compare, digest_file, verdict_of

        size = path.stat().st_size
        if size != obj.size:
            return Verdict("mismatch", None, {
                "message": f"size differs: local {size} bytes, remote {obj.size} bytes",
                "form": "size", "expected": str(obj.size), "actual": str(size)})
        return verdict_of(*compare(obj, digest_file(path)))

    def fetch(self, obj: ObjectInfo, sink: Sink) -> Fetched:
        """Stream exactly that version into ``sink``, checking it on the way."""
        from ckptrescue.stores.integrity import Digest, compare, verdict_of

        digest = Digest()
        where = self.url_of(obj.key, obj.version)
        for block in self.iter_content(obj):
            digest.update(block)
            try:
                sink.write(block)
            except OSError as exc:
                raise local_write_error(exc, sink, where) from exc
        verdict = verdict_of(*compare(obj, digest))
        return Fetched(verdict.status, verdict.algorithm, verdict.detail, size=digest.size,
                       sha256=digest.values()["sha256"], object=obj.to_json())

    def mismatch_detail(self, obj: ObjectInfo) -> dict[str, Any]:
        """What helps locate a mismatch in this object (Azure: the committed block list)."""
        return {}

    def describe_versions(self, versions: list[ObjectInfo]) -> None:
        """Complete listed versions with what history shows of each (S3: HEAD each);
        the listing says all there is by default."""
        return

    def version_anomalies(self, versions: list[ObjectInfo]) -> list[VersionAnomaly]:
        """Listing anomalies of one key's history (newest first); pure."""
        out: list[VersionAnomaly] = []
        latest = [e.version_id for e in versions if e.is_latest]
        if len(latest) > 1:
            out.append(VersionAnomaly("latest-count", f"{len(latest)} entries are current (expected "
                                      "one): the listing changed while it was read", latest))
        if versions and not latest:
            out.append(VersionAnomaly("no-current-version",
                                      "no current version: the object was deleted; the versions listed "
                                      "remain", [e.version or "?" for e in versions]))
        soft = [e.version or "?" for e in versions if e.soft_deleted]
        if soft:
            out.append(VersionAnomaly("soft-deleted", f"{len(soft)} soft-deleted version(s) listed "
                                                      "(never undeleted by the kit)", soft))
        return out

    def version_json(self, info: ObjectInfo) -> dict[str, Any]:
        """One version as history shows it."""
        return {"version_id": info.version_id, "is_latest": info.is_latest,
                "delete_marker": info.delete_marker, "deleted": info.deleted,
                "soft_deleted": info.soft_deleted, "kind": info.kind,
                "last_modified": info.last_modified, "size": info.size,
                "checksum": dict(info.hashes) or None, "etag": info.etag}

    def stored_sha256(self, info: ObjectInfo) -> str | None:
        """The version's whole-content SHA-256 as the store keeps it (hex), if it keeps one."""
        return None

    def unreadable(self, info: ObjectInfo) -> str | None:
        """Why this listed version cannot be read without changing the store, if it cannot."""
        return None

    def version_events(self, key: str, versions: list[ObjectInfo],
                       source: Path | str) -> dict[str, list[dict[str, Any]]]:
        """Who wrote or deleted each version, from the store's exported audit logs."""
        raise UsageError(f"{self.url.store_name} keeps no CloudTrail: --cloudtrail is for "
                         "s3:// URLs")


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
