"""The S3 backend: the kit's one read-only boto3 client (:func:`ckptrescue.stores.s3.client.make_client`,
whose ``before-parameter-build`` handler refuses every operation outside its allowlist) behind the
:class:`~ckptrescue.stores.base.Store` interface, with the hooks that only S3 answers:

* :meth:`S3Store.check_local` / :meth:`S3Store.fetch`: the stored ``Checksum*`` (full-object or
  composite, recomputed with the real part boundaries) or the ETag, never a guess
  (``s3/integrity.py``); a reset mid-body resumed with ``If-Match`` ranged GETs (``s3/objects.py``);
* :meth:`S3Store.describe_versions` (one HEAD per version, concurrently),
  :meth:`S3Store.version_anomalies`, :meth:`S3Store.version_json` and
  :meth:`S3Store.stored_sha256` (``s3/versions.py``): version ids, delete markers, null versions;
* :meth:`S3Store.version_events`: CloudTrail (``s3/cloudtrail.py``);
* :meth:`S3Store.settings` / :meth:`S3Store.judge`: versioning and Object Lock
  (``s3/protection.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.stores.base import (
    Fetched,
    MiB,
    ObjectInfo,
    Protection,
    Sink,
    Store,
    StoreOptions,
    StoreStats,
    Verdict,
)
from ckptrescue.stores.kinds import S3_CODES
from ckptrescue.stores.outputs import VersionAnomaly
from ckptrescue.stores.s3 import client as s3client
from ckptrescue.stores.s3.integrity import ObjectHead
from ckptrescue.stores.s3.objects import (
    VersionEntry,
    discover_layout,
    download_verified,
    fill_checksums,
    head_object,
    iter_object_pages,
    list_versions,
    provenance_for,
    verify_stream,
)
from ckptrescue.stores.urls import StoreUrl


class _SharedStats(StoreStats):
    """The s3 client's own counter seen as the store's (one choke point, one count)."""

    def __init__(self, client: Any) -> None:
        super().__init__()
        self.count_into(s3client.stats(client))


class S3Store(Store):
    scheme: ClassVar[str] = "s3"
    READ_OPERATIONS: ClassVar[frozenset[str]] = s3client.READ_OPERATIONS
    CODES: ClassVar[dict[str, str]] = S3_CODES
    RECORDS: ClassVar[str] = "s3"

    def __init__(self, url: StoreUrl, options: StoreOptions, *, client: Any = None) -> None:
        super().__init__(url, options)
        endpoint = options.endpoint_url or os.environ.get("CKPTRESCUE_S3_ENDPOINT")
        self.client_options = s3client.ClientOptions(
            endpoint_url=endpoint, profile=options.profile, region=options.region,
            checksum_when=options.checksum_when,
            max_pool_connections=max(16, self.tuning.concurrency * 2))
        self.client = client or s3client.make_client(options=self.client_options)
        self.stats = _SharedStats(self.client)
        self._trails: dict[str, Any] = {}

    @classmethod
    def of(cls, url: StoreUrl, client_options: s3client.ClientOptions | None = None,
           client: Any = None) -> S3Store:
        """The store over ``client`` (or a client made with ``client_options``)."""
        o = client_options or s3client.ClientOptions()
        options = StoreOptions(endpoint_url=o.endpoint_url, profile=o.profile, region=o.region,
                               checksum_when=o.checksum_when,
                               concurrency=max(1, o.max_pool_connections // 2))
        return cls(url, options, client=client or s3client.make_client(options=o))

    def url_of(self, key: str, version: str | None = None) -> str:
        out = self.url.child(key)
        return f"{out}?versionId={version}" if version else out

    def connection(self) -> dict[str, Any]:
        return self.client_options.to_json()

    # ---- reads -----------------------------------------------------------------------------

    def _info(self, key: str, head: ObjectHead) -> ObjectInfo:
        hashes = {alg.lower(): value.display for alg, value in head.checksums.items()}
        if head.etag:
            hashes["etag"] = head.etag.strip('"')
        return ObjectInfo(key=key, size=int(head.size or 0),
                          version=head.version_id if head.version_id not in (None, "null")
                          else None,
                          etag=head.etag, last_modified=head.last_modified, hashes=hashes,
                          details={"checksum_type": head.checksum_type,
                                   "object_lock_mode": head.object_lock_mode,
                                   "legal_hold": head.legal_hold}, native=head)

    def head(self, key: str, version: str | None = None) -> ObjectInfo:
        return self._info(key, head_object(self.client, self.url.bucket, key, version))

    def _listed(self, item: dict[str, Any]) -> ObjectInfo:
        return ObjectInfo(key=item["Key"], size=int(item.get("Size") or 0),
                          etag=item.get("ETag"),
                          last_modified=str(item.get("LastModified") or "") or None,
                          hashes={"etag": str(item.get("ETag") or "").strip('"')})

    def iter_listing(self, prefix: str) -> Iterator[list[ObjectInfo]]:
        for page in iter_object_pages(self.client, self.url.bucket, prefix):
            yield [self._listed(item) for item in page if not item["Key"].endswith("/")]

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        return sorted((o for page in self.iter_listing(prefix) for o in page),
                      key=lambda o: o.key)

    def find(self, key: str) -> ObjectInfo | None:
        # the key itself sorts first among the keys it prefixes: one short listing tells
        for page in iter_object_pages(self.client, self.url.bucket, key, max_keys=1):
            return self._listed(page[0]) if page and page[0]["Key"] == key else None
        return None

    def list_versions(self, prefix: str) -> dict[str, list[ObjectInfo]]:
        out: dict[str, list[ObjectInfo]] = {}
        for key, entries in list_versions(self.client, self.url.bucket, prefix).items():
            out[key] = [ObjectInfo(key=key, size=int(e.size or 0), version=e.version_id,
                                   etag=e.etag, last_modified=e.last_modified,
                                   is_latest=e.is_latest, deleted=e.delete_marker,
                                   kind="delete-marker" if e.delete_marker else "version",
                                   native=e)
                        for e in entries]
        return out

    def _pin(self, obj: ObjectInfo) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"Bucket": self.url.bucket, "Key": obj.key}
        if obj.version:
            kwargs["VersionId"] = obj.version
        elif obj.etag:
            kwargs["IfMatch"] = obj.etag  # the same bytes on every range, or a 412
        return kwargs

    def read_range(self, obj: ObjectInfo, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        where = self.url_of(obj.key, obj.version)
        try:
            response = self.client.get_object(Range=f"bytes={start}-{start + length - 1}",
                                              **self._pin(obj))
            data: bytes = response["Body"].read()
        except Exception as exc:
            raise s3client.translate_error(exc, where) from exc
        s3client.stats(self.client).add_bytes(len(data))
        return data

    def iter_content(self, obj: ObjectInfo, chunk: int = 8 * MiB) -> Iterator[bytes]:
        where = self.url_of(obj.key, obj.version)
        try:
            body = self.client.get_object(**self._pin(obj))["Body"]
            while block := body.read(chunk):
                s3client.stats(self.client).add_bytes(len(block))
                yield block
        except Exception as exc:
            raise s3client.translate_error(exc, where) from exc

    def settings(self) -> dict[str, Any]:
        from ckptrescue.stores.s3.protection import read_settings

        return read_settings(self.client, self.url.bucket)

    def judge(self, settings: dict[str, Any]) -> Protection:
        from ckptrescue.stores.s3.protection import judge_s3

        return judge_s3(settings)

    # ---- hooks -----------------------------------------------------------------------------

    @staticmethod
    def _head_of(obj: ObjectInfo) -> ObjectHead | None:
        native = obj.native
        if isinstance(native, VersionEntry):
            return native.head
        return native if isinstance(native, ObjectHead) else None

    def check_local(self, obj: ObjectInfo, path: Path) -> Verdict:
        """The stored checksum (composite ones with the real part boundaries) or ETag
        recomputed from the local bytes; nothing downloaded."""
        local_size = path.stat().st_size
        head = head_object(self.client, self.url.bucket, obj.key, obj.version)
        obj.native = head  # a --download that follows reads exactly this version
        if head.size is not None and head.size != local_size:
            return Verdict("mismatch", None, {
                "message": f"size differs: local {local_size} bytes, remote {head.size} bytes",
                "form": "size", "expected": str(head.size), "actual": str(local_size)})
        layout = discover_layout(self.client, head)
        with open(path, "rb") as fh:
            check = verify_stream(head, layout, fh, provenance=provenance_for(self.client))
        detail = check.detail()
        if layout is not None:
            detail["layout"] = layout.to_json()
        return Verdict(check.status, check.algorithm, detail)

    def fetch(self, obj: ObjectInfo, sink: Sink) -> Fetched:
        got = download_verified(self.client, self.url.bucket, obj.key, sink,  # type: ignore[arg-type]
                                version_id=obj.version, head=self._head_of(obj))
        check = got.check
        return Fetched(check.status, check.algorithm, check.detail(), size=got.size,
                       sha256=got.sha256, object=got.head.to_json(),
                       layout=got.layout.to_json() if got.layout else None)

    def describe_versions(self, versions: list[ObjectInfo]) -> None:
        entries = [v.native for v in versions if isinstance(v.native, VersionEntry)]
        with ThreadPoolExecutor(max_workers=16) as pool:  # one HEAD per version, concurrently
            list(pool.map(lambda e: fill_checksums(self.client, self.url.bucket, e), entries))

    def version_anomalies(self, versions: list[ObjectInfo]) -> list[VersionAnomaly]:
        from ckptrescue.stores.s3.versions import find_anomalies

        return find_anomalies([v.native for v in versions if isinstance(v.native, VersionEntry)])

    def version_json(self, info: ObjectInfo) -> dict[str, Any]:
        entry = info.native
        if not isinstance(entry, VersionEntry):
            return super().version_json(info)
        out = entry.to_json()
        if entry.error:
            out["error"] = entry.error
        return out

    def stored_sha256(self, info: ObjectInfo) -> str | None:
        from ckptrescue.stores.s3.versions import stored_sha256_hex

        entry = info.native
        return stored_sha256_hex(entry) if isinstance(entry, VersionEntry) else None

    def version_events(self, key: str, versions: list[ObjectInfo],
                       source: Path | str) -> dict[str, list[dict[str, Any]]]:
        from ckptrescue.stores.s3 import cloudtrail as ct

        events = self._trails.get(str(source))
        if events is None:
            events = self._trails[str(source)] = ct.load_events(source, bucket=self.url.bucket)
        return {v.version_id: ct.correlate(events, key, v.version_id, v.last_modified,
                                           delete_marker=v.delete_marker) for v in versions}
