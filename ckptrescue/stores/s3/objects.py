"""Read one object's metadata, part layout and versions; download a version with verification.

Public API (used by the S3 backend, ``stores/s3/backend.py``, and by the datasets code):

* :func:`list_objects` / :func:`iter_object_pages` -> the current objects under a prefix
* :func:`head_object` -> :class:`ObjectHead` (``ChecksumMode=ENABLED``); 404 is
  :class:`~ckptrescue.stores.base.ObjectGone`
* :func:`discover_layout` -> :class:`PartLayout` or None (GetObjectAttributes ObjectParts, else
  HeadObject ``PartNumber=i``)
* :func:`key_versions` -> every version and delete marker of one key, newest first, each version
  with its stored checksums
* :func:`download_verified` -> stream a (version of an) object into a binary file object, hashing
  every relevant algorithm on the way, and return the :class:`Check`

Everything goes through the read-only client of :mod:`ckptrescue.stores.s3.client`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any
from urllib.parse import urlparse

from ckptrescue.errors import RemoteError
from ckptrescue.model import JsonObject
from ckptrescue.stores.base import ObjectGone, local_write_error
from ckptrescue.stores.s3.checksums import (
    checksums_from_response,
    composite_from_parts,
    etag_multipart_from_parts,
    parse_etag,
    valid_width,
)
from ckptrescue.stores.s3.client import is_not_found, stats, translate_error
from ckptrescue.stores.s3.integrity import Check, ObjectHead, PartLayout, make_plan
from ckptrescue.stores.s3.stall import StallGuard

CHUNK = 1 << 20


def iso(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return str(value)


def provenance_for(client: Any) -> str:
    """"server-verified" on AWS (it validates uploaded checksums), else "client-asserted"."""
    host = urlparse(str(client.meta.endpoint_url)).hostname or ""
    return "server-verified" if host.endswith((".amazonaws.com", ".amazonaws.com.cn")) else (
        "client-asserted"
    )


def iter_object_pages(client: Any, bucket: str, prefix: str, *, max_keys: int | None = None
                      ) -> Iterator[list[dict[str, Any]]]:
    """ListObjectsV2 pages under ``prefix`` (kit errors on failure)."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    if max_keys:
        kwargs["MaxKeys"] = max_keys
    while True:
        try:
            response = client.list_objects_v2(**kwargs)
        except Exception as exc:
            raise translate_error(exc, f"s3://{bucket}/{prefix}") from exc
        yield list(response.get("Contents") or [])
        token = response.get("NextContinuationToken")
        if max_keys or not response.get("IsTruncated") or not token:
            return
        kwargs["ContinuationToken"] = token


def list_objects(client: Any, bucket: str, prefix: str) -> dict[str, dict[str, Any]]:
    """Every object key under ``prefix`` -> its listing entry (ListObjectsV2, paginated)."""
    return {item["Key"]: item for page in iter_object_pages(client, bucket, prefix)
            for item in page}


def head_from_response(bucket: str, key: str, response: dict[str, Any]) -> ObjectHead:
    metadata = {str(k).lower(): str(v) for k, v in (response.get("Metadata") or {}).items()}
    return ObjectHead(
        bucket=bucket,
        key=key,
        size=response.get("ContentLength", response.get("ObjectSize")),
        etag=response.get("ETag"),
        version_id=response.get("VersionId"),
        last_modified=iso(response.get("LastModified")),
        checksums=checksums_from_response(response),
        checksum_type=response.get("ChecksumType"),
        parts_count=response.get("PartsCount"),
        sse=response.get("ServerSideEncryption"),
        sse_customer_algorithm=response.get("SSECustomerAlgorithm"),
        metadata=metadata,
        object_lock_mode=response.get("ObjectLockMode"),
        object_lock_retain_until=iso(response.get("ObjectLockRetainUntilDate")),
        legal_hold=response.get("ObjectLockLegalHoldStatus"),
    )


def head_object(client: Any, bucket: str, key: str, version_id: str | None = None) -> ObjectHead:
    """HeadObject with checksums; :class:`ObjectGone` on 404/405, kit errors otherwise."""
    import botocore.exceptions as bx

    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "ChecksumMode": "ENABLED"}
    if version_id:
        kwargs["VersionId"] = version_id
    where = f"s3://{bucket}/{key}" + (f"?versionId={version_id}" if version_id else "")
    try:
        response = client.head_object(**kwargs)
    except bx.ClientError as exc:
        headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        marker = headers.get("x-amz-delete-marker") == "true"
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 405 or (is_not_found(exc) and marker):
            raise ObjectGone(f"{where}: is a delete marker", delete_marker=True) from exc
        if is_not_found(exc):
            raise ObjectGone(f"{where}: no such object") from exc
        raise translate_error(exc, where) from exc
    except Exception as exc:
        raise translate_error(exc, where) from exc
    head = head_from_response(bucket, key, response)
    if head.version_id is None and version_id:
        head.version_id = version_id
    return head


def discover_layout(client: Any, head: ObjectHead) -> PartLayout | None:
    """The real part sizes of a multipart object (None for single-part objects).

    GetObjectAttributes ``ObjectParts`` first (sizes and per-part checksums in one call per 1000
    parts); else ``HeadObject(PartNumber=i)`` for every part. Per-part ETags/checksums are kept
    only if they reproduce the object's ETag / composite value.
    """
    parts = head.part_count
    if not parts:
        return None
    layout = _layout_from_attributes(client, head, parts)
    if layout is None:
        layout = _layout_from_part_heads(client, head, parts)
    if layout is None:
        return None
    if head.size is not None and sum(layout.sizes) != head.size:
        return None
    _validate_part_values(head, layout)
    return layout


def _version_kwargs(head: ObjectHead) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"Bucket": head.bucket, "Key": head.key}
    if head.version_id and head.version_id != "null":
        kwargs["VersionId"] = head.version_id
    return kwargs


def _layout_from_attributes(client: Any, head: ObjectHead, parts: int) -> PartLayout | None:
    import botocore.exceptions as bx

    sizes: dict[int, int] = {}
    per_part: dict[str, dict[int, str]] = {}
    ctype: str | None = None
    marker = 0
    try:
        while True:
            response = client.get_object_attributes(
                **_version_kwargs(head),
                ObjectAttributes=["ETag", "Checksum", "ObjectParts", "ObjectSize"],
                MaxParts=1000,
                PartNumberMarker=marker,
            )
            ctype = (response.get("Checksum") or {}).get("ChecksumType") or ctype
            object_parts = response.get("ObjectParts") or {}
            for part in object_parts.get("Parts") or []:
                number = int(part["PartNumber"])
                if "Size" in part:
                    sizes[number] = int(part["Size"])
                for alg, value in checksums_from_response(part).items():
                    per_part.setdefault(alg, {})[number] = value.value
            if not object_parts.get("IsTruncated"):
                break
            marker = int(object_parts.get("NextPartNumberMarker") or 0)
            if not marker:
                break
    except (bx.ClientError, bx.BotoCoreError):
        return None
    if ctype and not head.checksum_type:
        head.checksum_type = ctype
    if sorted(sizes) != list(range(1, parts + 1)):
        return None  # no ObjectParts (moto, or no additional checksum): the type is kept on head
    layout = PartLayout(
        sizes=[sizes[i] for i in range(1, parts + 1)],
        source="GetObjectAttributes",
        checksum_type=ctype,
    )
    for alg, values in per_part.items():
        if sorted(values) == list(range(1, parts + 1)):
            layout.part_checksums[alg] = [values[i] for i in range(1, parts + 1)]
    return layout


def _layout_from_part_heads(client: Any, head: ObjectHead, parts: int) -> PartLayout | None:
    import botocore.exceptions as bx

    sizes: list[int] = []
    etags: list[str | None] = []
    per_part: dict[str, list[str]] = {}
    try:
        for number in range(1, parts + 1):
            response = client.head_object(
                **_version_kwargs(head), PartNumber=number, ChecksumMode="ENABLED"
            )
            sizes.append(int(response["ContentLength"]))
            etags.append(response.get("ETag"))
            for alg, value in checksums_from_response(response).items():
                per_part.setdefault(alg, []).append(value.value)
    except (bx.ClientError, bx.BotoCoreError, KeyError, ValueError):
        return None
    layout = PartLayout(sizes=sizes, source="HeadObject PartNumber")
    values = [parse_etag(e)[0] for e in etags]
    if all(v and len(v) == 32 and parse_etag(e)[1] is None for v, e in zip(values, etags,
                                                                           strict=True)):
        layout.part_md5s = [str(v) for v in values]
    layout.part_checksums = {a: v for a, v in per_part.items() if len(v) == parts}
    return layout


def _validate_part_values(head: ObjectHead, layout: PartLayout) -> None:
    """Drop per-part values that do not reproduce the object's own value."""
    if layout.part_md5s is not None:
        object_etag, _ = parse_etag(head.etag)
        try:
            rebuilt = etag_multipart_from_parts([bytes.fromhex(m) for m in layout.part_md5s])
        except ValueError:
            rebuilt = ""
        if rebuilt.split("-")[0] != object_etag:
            layout.part_md5s = None
    for alg in list(layout.part_checksums):
        stored = head.checksums.get(alg)
        values = layout.part_checksums[alg]
        ok = stored is not None and all(valid_width(alg, v) for v in values)
        if ok:
            import base64

            rebuilt = composite_from_parts(alg, [base64.b64decode(v) for v in values])
            ok = rebuilt == stored.value  # type: ignore[union-attr]
        if not ok:
            del layout.part_checksums[alg]


# -- versions -------------------------------------------------------------------------------------


@dataclass
class VersionEntry:
    """One version or delete marker of a key, as listed (newest first)."""

    key: str
    version_id: str
    is_latest: bool
    delete_marker: bool
    last_modified: str | None
    size: int | None = None
    etag: str | None = None
    checksum_algorithms: list[str] = field(default_factory=list)
    head: ObjectHead | None = None  # filled by key_versions(with_checksums=True)
    error: str | None = None

    def checksum_json(self) -> dict[str, Any] | None:
        if self.head is None:
            return None
        return self.head.checksum_json()

    def to_json(self) -> JsonObject:
        return {
            "version_id": self.version_id,
            "is_latest": self.is_latest,
            "delete_marker": self.delete_marker,
            "last_modified": self.last_modified,
            "size": self.size,
            "checksum": self.checksum_json(),
        }


def iter_version_pages(
    client: Any, bucket: str, prefix: str
) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Raw ListObjectVersions pages (Versions, DeleteMarkers), following the markers."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        try:
            response = client.list_object_versions(**kwargs)
        except Exception as exc:
            raise translate_error(exc, f"s3://{bucket}/{prefix}") from exc
        yield list(response.get("Versions") or []), list(response.get("DeleteMarkers") or [])
        if not response.get("IsTruncated"):
            return
        kwargs["KeyMarker"] = response.get("NextKeyMarker")
        kwargs["VersionIdMarker"] = response.get("NextVersionIdMarker")
        if not kwargs["KeyMarker"]:
            return


def list_versions(client: Any, bucket: str, prefix: str, *, exact: bool = False
                  ) -> dict[str, list[VersionEntry]]:
    """Every version and delete marker under ``prefix`` (or of exactly that key), by key,
    newest first. boto3 splits versions and markers into two lists; they are merged back in
    listing order: ``IsLatest`` first, then by LastModified (1-second resolution), versions
    before markers at equal time only when the marker is not the latest."""
    by_key: dict[str, list[tuple[int, VersionEntry]]] = {}
    seq = 0
    for versions, markers in iter_version_pages(client, bucket, prefix):
        for item, marker in [(v, False) for v in versions] + [(m, True) for m in markers]:
            entry = VersionEntry(
                key=item["Key"],
                version_id=str(item.get("VersionId") or "null"),
                is_latest=bool(item.get("IsLatest")),
                delete_marker=marker,
                last_modified=iso(item.get("LastModified")),
                size=item.get("Size"),
                etag=item.get("ETag"),
                checksum_algorithms=list(item.get("ChecksumAlgorithm") or []),
            )
            by_key.setdefault(entry.key, []).append((seq, entry))
            seq += 1
    out: dict[str, list[VersionEntry]] = {}
    for key, entries in by_key.items():
        if exact and key != prefix:
            continue
        entries.sort(key=lambda p: (not p[1].is_latest, _neg_time(p[1].last_modified), p[0]))
        out[key] = [e for _, e in entries]
    return out


def _neg_time(text: str | None) -> float:
    if not text:
        return 0.0
    try:
        return -datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def key_versions(client: Any, bucket: str, key: str, *, with_checksums: bool = True
                 ) -> list[VersionEntry]:
    """Versions and delete markers of one key, newest first; each version HEADed for its
    stored checksums (``entry.head``) when ``with_checksums``."""
    entries = list_versions(client, bucket, key, exact=True).get(key, [])
    if with_checksums:
        for entry in entries:
            fill_checksums(client, bucket, entry)
    return entries


def fill_checksums(client: Any, bucket: str, entry: VersionEntry) -> None:
    if entry.delete_marker:
        return
    try:
        entry.head = head_object(client, bucket, entry.key, entry.version_id)
    except ObjectGone as exc:
        entry.error = exc.message
    except RemoteError as exc:
        entry.error = exc.message


# -- downloads ------------------------------------------------------------------------------------


@dataclass
class Download:
    """A version streamed into a file object, with what its bytes were checked against."""

    head: ObjectHead
    check: Check
    layout: PartLayout | None
    size: int
    sha256: str
    resets: list[dict[str, Any]] = field(default_factory=list)  # resumed mid-body resets

    def to_json(self) -> JsonObject:
        return {
            "resets": self.resets,
            "object": self.head.to_json(),
            "status": self.check.status,
            "algorithm": self.check.algorithm,
            "detail": self.check.detail(),
            "size": self.size,
            "sha256": self.sha256,
        }


BODY_RETRIES = 3  # resumptions of one body after a connection reset, before giving up


@dataclass
class BodyRead:
    """What :func:`stream_body` read: the first GET's response and the resets it resumed."""

    response: dict[str, Any]
    size: int
    resets: list[dict[str, Any]] = field(default_factory=list)


def _reset_errors() -> tuple[type[BaseException], ...]:
    import http.client

    import botocore.exceptions as bx
    import urllib3.exceptions as ux

    return (bx.ResponseStreamingError, bx.IncompleteReadError, bx.ReadTimeoutError,
            bx.ConnectionClosedError, ux.ProtocolError, ux.ReadTimeoutError,
            http.client.IncompleteRead, ConnectionError)


def stream_body(client: Any, kwargs: dict[str, Any], sink: Callable[[bytes], None], *,
                where: str, chunk: int = CHUNK, retries: int = BODY_RETRIES) -> BodyRead:
    """GET an object and hand its body to ``sink`` block by block. A connection reset in the
    middle of the body is resumed with a ranged GET from the first byte not yet received,
    pinned to the same version and ETag (``If-Match``: never another object's bytes), at most
    ``retries`` times; each reset is listed in the result (callers report them). Raises a
    :class:`RemoteError` naming the resets when they do not stop, or the rate when the body
    trickles (:mod:`~ckptrescue.stores.s3.stall`: a stall is given up on, not resumed)."""
    resets_of = _reset_errors()
    with StallGuard() as guard:
        try:
            return _stream(client, kwargs, sink, guard, where=where, chunk=chunk,
                           retries=retries, resets_of=resets_of)
        except Exception as exc:
            if guard.stalled:
                raise RemoteError(f"{where}: {guard.why()}") from exc
            raise


def _stream(client: Any, kwargs: dict[str, Any], sink: Callable[[bytes], None],
            guard: StallGuard, *, where: str, chunk: int, retries: int,
            resets_of: tuple[type[BaseException], ...]) -> BodyRead:
    import botocore.exceptions as bx

    response = client.get_object(**kwargs)
    read = BodyRead(response=response, size=0)
    length = response.get("ContentLength")
    body = response["Body"]
    guard.watch(body)
    while True:
        try:
            while True:
                try:
                    block = body.read(chunk)
                except bx.FlexibleChecksumError:
                    # botocore's own check of a full-object value failed at the end of the
                    # stream: every byte has been delivered; the caller's check decides
                    return read
                if not block:
                    if guard.stalled:  # the guard cut it: what came is not the whole body
                        raise RemoteError(f"{where}: {guard.why()}")
                    return read
                sink(block)
                read.size += len(block)
                guard.moved(len(block))
        except resets_of as exc:
            if guard.stalled:
                raise
            if len(read.resets) >= retries:
                raise RemoteError(
                    f"{where}: the connection was reset in the middle of the body "
                    f"{len(read.resets) + 1} times (last after {read.size} bytes: "
                    f"{type(exc).__name__}); gave up after {retries} resumptions") from exc
            read.resets.append({"at": read.size, "error": type(exc).__name__})
            if isinstance(length, int) and read.size >= length:
                return read
            ranged = {k: v for k, v in kwargs.items() if k != "ChecksumMode"}
            ranged["Range"] = f"bytes={read.size}-"
            if response.get("ETag"):
                ranged["IfMatch"] = response["ETag"]
            if response.get("VersionId") not in (None, "null"):
                ranged["VersionId"] = response["VersionId"]
            answer = client.get_object(**ranged)
            _same_bytes(response, answer, read.size, where)
            body = answer["Body"]
            guard.watch(body)


def _same_bytes(first: dict[str, Any], ranged: dict[str, Any], start: int, where: str) -> None:
    """A ranged GET that resumes a body continues the same bytes: the same ETag, from the byte
    asked for. A server that ignores ``If-Match`` (the object changed between the requests) or
    the ``Range`` would otherwise have the kit keep two objects spliced into one."""
    etag, again = first.get("ETag"), ranged.get("ETag")
    if etag and again != etag:
        ranged["Body"].close()
        raise RemoteError(f"{where}: the object changed between reads: the ranged GET resuming "
                          f"a reset answered ETag {again}, not {etag} (the server ignored "
                          "If-Match); its bytes were not spliced onto the first ones")
    content_range = str(ranged.get("ContentRange") or "")
    if not content_range.startswith(f"bytes {start}-"):
        ranged["Body"].close()
        raise RemoteError(f"{where}: the ranged GET resuming a reset at byte {start} answered "
                          f"{content_range or 'the whole object'}; its bytes were not spliced "
                          "onto the first ones")


def download_verified(
    client: Any,
    bucket: str,
    key: str,
    dest: IO[bytes],
    *,
    version_id: str | None = None,
    head: ObjectHead | None = None,
    progress: Callable[[int], None] | None = None,
) -> Download:
    """Stream ``s3://bucket/key[?versionId]`` into ``dest`` and verify it on the way.

    The bytes are written exactly as received; the returned :class:`Download` says whether they
    match the object's stored checksum (composite ones with the real part boundaries) or ETag.
    Raises kit errors (RemoteError/UsageError/ObjectGone) when the object cannot be read.
    """
    import botocore.exceptions as bx

    if head is None:
        head = head_object(client, bucket, key, version_id)
    layout = discover_layout(client, head)
    plan = make_plan(head, layout, also=("SHA256",), provenance=provenance_for(client))
    where = f"s3://{bucket}/{key}" + (f"?versionId={version_id}" if version_id else "")
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "ChecksumMode": "ENABLED"}
    if version_id or head.version_id not in (None, "null"):
        kwargs["VersionId"] = version_id or head.version_id
    counter = stats(client)

    def sink(block: bytes) -> None:
        plan.update(block)
        try:
            dest.write(block)
        except OSError as exc:  # the destination (no space, I/O error): name it
            raise local_write_error(exc, dest, where) from exc
        counter.add_bytes(len(block))
        if progress:
            progress(len(block))

    try:
        read = stream_body(client, kwargs, sink, where=where)
    except ObjectGone:
        raise
    except Exception as exc:
        if isinstance(exc, bx.ClientError) and is_not_found(exc):
            raise ObjectGone(f"{where}: no such object") from exc
        raise translate_error(exc, where) from exc
    check = plan.finish()
    check.resets = read.resets
    return Download(head=head, check=check, layout=layout, size=check.size,
                    sha256=check.sha256 or "", resets=read.resets)


def verify_stream(head: ObjectHead, layout: PartLayout | None, stream: IO[bytes], *,
                  provenance: str = "client-asserted") -> Check:
    """Verify local bytes (any binary stream) against an object's stored values."""
    plan = make_plan(head, layout, also=(), provenance=provenance)
    while block := stream.read(CHUNK):
        plan.update(block)
    return plan.finish()
