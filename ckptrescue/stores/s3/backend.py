"""The S3 backend: the kit's one read-only boto3 client (:func:`ckptrescue.stores.s3.client.make_client`,
whose ``before-parameter-build`` handler refuses every operation outside its allowlist) behind the
:class:`~ckptrescue.stores.base.Store` interface. Integrity, history, preflight, preserve and
restore of S3 objects stay in ``ckptrescue.stores.s3``; this module adds ranged reads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, ClassVar

from ckptrescue.stores.base import MiB, ObjectInfo, Store, StoreOptions, StoreStats
from ckptrescue.stores.s3 import client as s3client
from ckptrescue.stores.s3.objects import head_object, list_versions
from ckptrescue.stores.s3.verify import list_objects
from ckptrescue.stores.urls import StoreUrl


class _SharedStats(StoreStats):
    """The s3 client's own counter seen as the store's (one choke point, one count)."""

    def __init__(self, client: Any) -> None:
        super().__init__()
        self.operations = s3client.stats(client).operations


class S3Store(Store):
    scheme: ClassVar[str] = "s3"
    READ_OPERATIONS: ClassVar[frozenset[str]] = s3client.READ_OPERATIONS

    def __init__(self, url: StoreUrl, options: StoreOptions, *, client: Any = None) -> None:
        super().__init__(url, options)
        endpoint = options.endpoint_url or os.environ.get("CKPTRESCUE_S3_ENDPOINT")
        self.client_options = s3client.ClientOptions(
            endpoint_url=endpoint, profile=options.profile, region=options.region,
            checksum_when=options.checksum_when,
            max_pool_connections=max(16, self.tuning.concurrency * 2))
        self.client = client or s3client.make_client(options=self.client_options)
        self.stats = _SharedStats(self.client)

    def _info(self, key: str, head: Any) -> ObjectInfo:
        hashes = {alg.lower(): value.display for alg, value in head.checksums.items()}
        if head.etag:
            hashes["etag"] = head.etag.strip('"')
        return ObjectInfo(key=key, size=int(head.size or 0),
                          version=head.version_id if head.version_id not in (None, "null")
                          else None,
                          etag=head.etag, last_modified=head.last_modified, hashes=hashes,
                          details={"checksum_type": head.checksum_type,
                                   "object_lock_mode": head.object_lock_mode,
                                   "legal_hold": head.legal_hold})

    def head(self, key: str, version: str | None = None) -> ObjectInfo:
        return self._info(key, head_object(self.client, self.url.bucket, key, version))

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        try:
            listing = list_objects(self.client, self.url.bucket, prefix)
        except Exception as exc:
            raise s3client.translate_error(exc, self.url.child(prefix)) from exc
        out = []
        for key in sorted(listing):
            if key.endswith("/"):
                continue
            item = listing[key]
            out.append(ObjectInfo(key=key, size=int(item.get("Size") or 0),
                                  etag=item.get("ETag"),
                                  last_modified=str(item.get("LastModified") or "") or None,
                                  hashes={"etag": str(item.get("ETag") or "").strip('"')}))
        return out

    def list_versions(self, prefix: str) -> dict[str, list[ObjectInfo]]:
        out: dict[str, list[ObjectInfo]] = {}
        for key, entries in list_versions(self.client, self.url.bucket, prefix).items():
            out[key] = [ObjectInfo(key=key, size=int(e.size or 0), version=e.version_id,
                                   etag=e.etag, last_modified=e.last_modified,
                                   is_latest=e.is_latest, deleted=e.delete_marker,
                                   kind="delete-marker" if e.delete_marker else "version")
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
        from ckptrescue.stores.s3.preflight import preflight

        return preflight(f"s3://{self.url.bucket}", client=self.client).to_json()
