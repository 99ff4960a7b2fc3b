"""The Google Cloud Storage backend: the JSON API over one read-only HTTP session.

Every request — ours, and those of a ``google-cloud-storage`` client handed the same session
(:meth:`GcsStore.sdk_client`) — passes :meth:`ReadOnlySession.request`, which names the JSON API
method (:func:`operation_of`) and raises :class:`~ckptrescue.errors.RefusedError` for anything
outside :data:`READ_OPERATIONS` before a byte is sent: uploads, rewrites, compose, patch, delete,
restore of soft-deleted objects, ACL/IAM/retention changes — all refused. With real credentials
the session is ``google-auth``'s ``AuthorizedSession`` with the ``devstorage.read_only`` scope: a
second, server-side refusal.

Credentials come from Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud,
metadata server). The endpoint is ``https://storage.googleapis.com`` unless ``--endpoint-url``,
``CKPTRESCUE_GCS_ENDPOINT`` or ``STORAGE_EMULATOR_HOST`` (the SDK's emulator variable) say
otherwise; an overridden endpoint is reached without credentials, as emulators expect.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

from ckptrescue.errors import CkptRescueError, RemoteError, UsageError
from ckptrescue.stores.base import (
    MiB,
    Notes,
    ObjectInfo,
    Protection,
    Store,
    StoreOptions,
    StoreStats,
)
from ckptrescue.stores.urls import StoreUrl

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
READ_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
READ_OPERATIONS = frozenset({"buckets.get", "objects.list", "objects.get"})

_BUCKET = re.compile(r"^/(?:storage/v1/)?b/[^/]+/?$")
_LIST = re.compile(r"^/(?:storage/v1/)?b/[^/]+/o/?$")
_OBJECT = re.compile(r"^/(?:download/)?(?:storage/v1/)?b/[^/]+/o/.+$")


def operation_of(method: str, url: str) -> str:
    """The JSON API method a request performs (pure); anything not a read is named by its HTTP
    method and path (e.g. ``POST /upload/storage/v1/b/x/o``)."""
    parts = urlsplit(url)
    path = parts.path
    method = method.upper()
    if method in ("GET", "HEAD") and not path.startswith("/upload/") and (
            "uploadType=" not in parts.query):
        if _BUCKET.match(path):
            return "buckets.get"
        if _LIST.match(path):
            return "objects.list"
        if _OBJECT.match(path) and not path.endswith(("/acl", "/iam")) and "/acl/" not in path:
            return "objects.get"
    return f"{method} {path}"


def _session_class(base: type) -> type:
    class ReadOnlySession(base):  # type: ignore[misc,valid-type]
        """The one place every GCS request passes: refuses non-read methods, counts."""

        ckptrescue_stats: StoreStats

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            self.ckptrescue_stats.admit(operation_of(method, url), READ_OPERATIONS, "GCS")
            return super().request(method, url, *args, **kwargs)

    return ReadOnlySession


def endpoint_for(options: StoreOptions) -> tuple[str, bool]:
    """(endpoint, is_emulator)."""
    custom = (options.endpoint_url or os.environ.get("CKPTRESCUE_GCS_ENDPOINT")
              or os.environ.get("STORAGE_EMULATOR_HOST"))
    if custom:
        if "://" not in custom:
            custom = "http://" + custom
        return custom.rstrip("/"), True
    return DEFAULT_ENDPOINT, False


def make_session(options: StoreOptions, stats: StoreStats) -> tuple[Any, str]:
    """(read-only session, endpoint)."""
    endpoint, emulator = endpoint_for(options)
    if emulator:
        import requests

        session = _session_class(requests.Session)()
    else:
        try:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError
            from google.auth.transport.requests import AuthorizedSession
        except ImportError as exc:
            raise UsageError("google-auth is not installed",
                             hint="pip install 'ckptrescue[gcs]'") from exc
        try:
            credentials, _project = google.auth.default(scopes=[READ_SCOPE])
        except DefaultCredentialsError as exc:
            raise UsageError("no Google Cloud credentials found",
                             hint="set GOOGLE_APPLICATION_CREDENTIALS or run "
                                  "`gcloud auth application-default login`") from exc
        session = _session_class(AuthorizedSession)(credentials)
    session.ckptrescue_stats = stats
    from requests.adapters import HTTPAdapter

    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=32, max_retries=2)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session, endpoint


class GcsStore(Store):
    scheme: ClassVar[str] = "gs"
    READ_OPERATIONS: ClassVar[frozenset[str]] = READ_OPERATIONS

    def __init__(self, url: StoreUrl, options: StoreOptions) -> None:
        super().__init__(url, options)
        self.session, self.endpoint = make_session(options, self.stats)
        self.base = f"{self.endpoint}/storage/v1/b/{quote(url.bucket, safe='')}"

    def sdk_client(self) -> Any:
        """A ``google.cloud.storage.Client`` that sends everything through this store's
        read-only session (for code that wants the SDK's objects)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project="ckptrescue-read-only", credentials=AnonymousCredentials(),
                              _http=self.session,
                              client_options={"api_endpoint": self.endpoint})

    def _get(self, url: str, what: str, *, params: dict[str, Any] | None = None,
             headers: dict[str, str] | None = None, stream: bool = False) -> Any:
        try:
            response = self.session.get(url, params=params, headers=headers, stream=stream,
                                        timeout=(10, 120))
        except CkptRescueError:
            raise
        except Exception as exc:
            raise RemoteError(f"{what}: cannot reach the GCS endpoint ({exc})",
                              hint="check --endpoint-url / CKPTRESCUE_GCS_ENDPOINT") from exc
        if response.status_code in (200, 206):
            return response
        message = response.text[:200].strip().replace("\n", " ")
        if response.status_code == 404:
            raise UsageError(f"{what}: not found")
        if response.status_code in (401, 403):
            raise RemoteError(f"{what}: access denied ({response.status_code})",
                              hint="check the principal's storage.objects.get/list permissions")
        if response.status_code == 412:
            raise RemoteError(f"{what}: the object changed while it was read (412)")
        raise RemoteError(f"{what}: HTTP {response.status_code}: {message}")

    def _object_url(self, key: str) -> str:
        return f"{self.base}/o/{quote(key, safe='')}"

    def _info(self, item: dict[str, Any]) -> ObjectInfo:
        hashes = {}
        if item.get("md5Hash"):
            hashes["md5"] = item["md5Hash"]
        if item.get("crc32c"):
            hashes["crc32c"] = item["crc32c"]
        soft = bool(item.get("softDeleteTime"))
        noncurrent = bool(item.get("timeDeleted")) and not soft
        details = {k: item[k] for k in ("generation", "metageneration", "componentCount",
                                         "timeDeleted", "softDeleteTime", "hardDeleteTime",
                                         "retention", "retentionExpirationTime",
                                         "temporaryHold", "eventBasedHold", "storageClass")
                   if k in item}
        return ObjectInfo(key=item["name"], size=int(item.get("size") or 0),
                          version=str(item["generation"]) if item.get("generation") else None,
                          etag=item.get("etag"), last_modified=item.get("updated"),
                          hashes=hashes, is_latest=not (soft or noncurrent),
                          deleted=soft or noncurrent, soft_deleted=soft,
                          kind="soft-deleted" if soft else "version",
                          composite=bool(item.get("componentCount")), details=details)

    def head(self, key: str, version: str | None = None) -> ObjectInfo:
        params = {"generation": version} if version else None
        where = self.url_of(key, version)
        return self._info(self._get(self._object_url(key), where, params=params).json())

    def _list(self, prefix: str, **extra: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"prefix": prefix, "maxResults": 1000, **extra}
        while True:
            page = self._get(f"{self.base}/o", self.url.child(prefix), params=params).json()
            items.extend(page.get("items", []))
            token = page.get("nextPageToken")
            if not token:
                return items
            params["pageToken"] = token

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        items = [self._info(i) for i in self._list(prefix)]
        return sorted((i for i in items if not i.key.endswith("/") and i.is_latest),
                      key=lambda i: i.key)

    def list_versions(self, prefix: str) -> dict[str, list[ObjectInfo]]:
        infos = [self._info(i) for i in self._list(prefix, versions="true")]
        try:
            # Soft-deleted objects (listed, never restored). Only items that carry a
            # softDeleteTime count: a server that ignores the parameter lists live objects.
            infos += [self._info(i) for i in self._list(prefix, softDeleted="true")
                      if i.get("softDeleteTime")]
        except (RemoteError, UsageError):
            pass
        out: dict[str, list[ObjectInfo]] = {}
        seen: set[tuple[str, str | None, bool]] = set()
        for info in infos:
            ident = (info.key, info.version, info.soft_deleted)
            if ident in seen or info.key.endswith("/"):
                continue
            seen.add(ident)
            out.setdefault(info.key, []).append(info)
        for entries in out.values():
            entries.sort(key=lambda i: (not i.is_latest, -int(i.version or 0)))
        return dict(sorted(out.items()))

    def _media(self, obj: ObjectInfo, headers: dict[str, str] | None, stream: bool) -> Any:
        params: dict[str, Any] = {"alt": "media"}
        if obj.version:
            params["generation"] = obj.version
        if obj.soft_deleted:
            params["softDeleted"] = "true"
        return self._get(self._object_url(obj.key), self.url_of(obj.key, obj.version),
                         params=params, headers=headers, stream=stream)

    def read_range(self, obj: ObjectInfo, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        end = start + length - 1
        response = self._media(obj, {"Range": f"bytes={start}-{end}",
                                     "Accept-Encoding": "identity"}, False)
        data: bytes = response.content
        if response.status_code == 200 and len(data) > length:  # range ignored
            data = data[start:start + length]
        return data

    def iter_content(self, obj: ObjectInfo, chunk: int = 8 * MiB) -> Iterator[bytes]:
        response = self._media(obj, {"Accept-Encoding": "identity"}, True)
        try:
            yield from response.iter_content(chunk_size=chunk)
        finally:
            response.close()

    def settings(self) -> dict[str, Any]:
        try:
            data = self._get(self.base, f"gs://{self.url.bucket}").json()
        except RemoteError as exc:  # denied: the verdict is unknown, the reason named
            return {"bucket": self.url.bucket, "error": exc.message}
        return parse_bucket(data)

    def judge(self, settings: dict[str, Any]) -> Protection:
        return judge_gcs(settings)


def parse_bucket(data: dict[str, Any]) -> dict[str, Any]:
    """The protection settings of a bucket resource (pure)."""
    retention = data.get("retentionPolicy") or {}
    soft = data.get("softDeletePolicy") or {}
    return {
        "bucket": data.get("name"),
        "versioning": bool((data.get("versioning") or {}).get("enabled")),
        "retention_period_s": int(retention["retentionPeriod"])
        if retention.get("retentionPeriod") else None,
        "retention_locked": bool(retention.get("isLocked")),
        "retention_effective": retention.get("effectiveTime"),
        "soft_delete_s": int(soft["retentionDurationSeconds"])
        if soft.get("retentionDurationSeconds") else None,
        "object_retention": (data.get("objectRetention") or {}).get("mode"),
        "default_event_based_hold": bool(data.get("defaultEventBasedHold")),
        "fields_present": sorted(k for k in ("versioning", "retentionPolicy",
                                             "softDeletePolicy", "objectRetention")
                                 if k in data),
    }


def b64_crc32c(data_crc: int) -> str:
    return base64.b64encode(data_crc.to_bytes(4, "big")).decode()


def judge_gcs(s: dict[str, Any]) -> Protection:
    """What a bucket's settings (:func:`parse_bucket`) mean for the evidence (pure)."""
    notes = Notes()
    if "error" in s:
        notes.not_read(f"bucket settings: {s['error']}")
        return notes.judged("unknown")
    locked = bool(s.get("retention_locked"))
    if not s.get("versioning"):
        notes.warn("versioning", "object versioning is off: overwrites and deletes are final")
    if s.get("soft_delete_s") is None:
        if "softDeletePolicy" not in s.get("fields_present", []):
            notes.unknown.append("soft delete policy: not in the bucket resource")
            notes.issues.append(("setting-unknown", notes.unknown[-1]))
        notes.warn("no-soft-delete", "soft delete is off: a deleted object is gone at once")
    if not locked and not s.get("object_retention"):
        notes.warn("no-lock", "no locked retention policy (bucket lock) or object retention")
    if locked:
        notes.issues.append(("immutable", f"{s.get('bucket')}: keeps immutable versions"))
        return notes.judged("immutable")
    return notes.judged("versioned" if s.get("versioning") or s.get("soft_delete_s")
                        else "unprotected")
