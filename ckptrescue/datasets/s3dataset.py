"""Datasets that live in S3: ``manifest build`` and ``manifest audit`` of an ``s3://`` prefix.

Objects are listed and streamed through SHA-256 with the kit's read-only client (nothing is
written to disk or to the bucket); names in the manifest are keys relative to the prefix, so
the same manifest audits a local copy or the bucket. With ``--scheduler`` each Dask worker opens
its own read-only client and hashes its share of the keys where they live (in S3).

An audit first asks the store (HeadObject with ``ChecksumMode=ENABLED``): an object whose stored
SHA-256 is a full-object hash is checked against the manifest without reading it; only objects
without one (no checksum, another algorithm, a COMPOSITE multipart checksum) are downloaded.
A manifest built with ``--checksums`` also records CRCs (CRC64NVME, CRC32C, CRC32): an object
whose store holds a full-object CRC of an algorithm the manifest recorded, with the same value,
is checked without being read too (a CRC that differs makes the object downloaded and hashed,
so the row carries its real SHA-256).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.datasets.audit import AuditResult, AuditRow, load_expected
from ckptrescue.datasets.manifest_files import (
    ManifestEntry,
    ManifestResult,
    UnreadableFile,
    default_jobs,
    partial_path,
    record_manifest,
    sidecar_path,
    write_outputs,
)
from ckptrescue.datasets.progress import ProgressFn, Tracker
from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject

_CHUNK = 1 << 20


def normalise(location: str | os.PathLike[str]) -> str:
    text = str(location)
    if text.startswith("s3:/") and not text.startswith("s3://"):
        text = "s3://" + text[4:]  # a Path collapsed the double slash
    return text


@dataclass(frozen=True)
class S3Object:
    rel: bytes
    key: str
    size: int
    mtime_ns: int
    # ChecksumAlgorithm from the listing; None when the store did not say
    algorithms: tuple[str, ...] | None = None
    etag: str | None = None


def read_client(endpoint_url: str | None) -> Any:
    from ckptrescue.stores.s3.client import make_client

    return make_client(endpoint_url=endpoint_url)


def list_objects(url: str, *, endpoint_url: str | None = None) -> tuple[str, list[S3Object]]:
    """(bucket, objects under the prefix) with keys relative to the prefix."""
    from ckptrescue.stores.s3.client import translate_error
    from ckptrescue.stores.s3.urls import parse_s3_url

    parsed = parse_s3_url(url)
    prefix = parsed.key if not parsed.key or parsed.key.endswith("/") else parsed.key + "/"
    client = read_client(endpoint_url)
    out: list[S3Object] = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=parsed.bucket,
                                                                      Prefix=prefix):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                if key.endswith("/"):
                    continue  # a "folder" marker object
                mtime = obj["LastModified"].timestamp()
                algs = obj.get("ChecksumAlgorithm")
                out.append(S3Object(key[len(prefix):].encode(), key, int(obj["Size"]),
                                    int(mtime * 1e9),
                                    None if algs is None else tuple(str(a).upper()
                                                                    for a in algs),
                                    _etag(obj.get("ETag"))))
    except Exception as exc:  # botocore errors become one-line kit errors
        raise translate_error(exc, url) from exc
    finally:
        client.close()  # its pooled connections, now, not when it is collected
    return parsed.bucket, sorted(out, key=lambda o: o.rel)


def _etag(value: Any) -> str | None:
    return None if value is None else str(value).strip().strip('"')


def _stats_of(client: Any) -> Any:
    """The kit client's :func:`~ckptrescue.stores.s3.client.stats` (None for another client)."""
    from ckptrescue.stores.s3.client import stats

    try:
        return stats(client)
    except TypeError:
        return None


def hash_object(client: Any, bucket: str, obj: S3Object,
                checksums: tuple[str, ...] = ()) -> ManifestEntry | UnreadableFile:
    from ckptrescue.datasets.hashing import checksum_hashers

    digest = hashlib.sha256()
    extra = checksum_hashers(checksums) if checksums else {}
    size = 0
    counter = _stats_of(client)
    from ckptrescue.errors import CkptRescueError
    from ckptrescue.stores.s3.objects import stream_body

    def sink(block: bytes) -> None:
        nonlocal size
        digest.update(block)
        for hasher in extra.values():
            hasher.update(block)
        size += len(block)
        if counter is not None:
            counter.add_bytes(len(block))

    try:
        # a connection reset mid-body resumes from the byte reached (same ETag), bounded
        read = stream_body(client, {"Bucket": bucket, "Key": obj.key}, sink,
                           where=f"s3://{bucket}/{obj.key}", chunk=_CHUNK)
        response = read.response
        etag, version = _etag(response.get("ETag")), response.get("VersionId")
    except CkptRescueError as exc:
        return UnreadableFile(obj.rel, exc.message, size)
    except Exception as exc:  # a read error of one object is a row, not the end of the run
        return UnreadableFile(obj.rel, f"{type(exc).__name__}: {exc}", size)
    # the ETag and version of what was read (the GET's, not the listing's: the object may have
    # been overwritten in between)
    modified = response.get("LastModified")
    mtime_ns = int(modified.timestamp() * 1e9) if modified is not None else obj.mtime_ns
    sums = {alg: base64.b64encode(h.digest()).decode("ascii") for alg, h in extra.items()}
    return ManifestEntry(obj.rel, size, mtime_ns, digest.hexdigest(), etag=etag,
                         version_id=None if version in (None, "null") else str(version),
                         checksums=sums or None)


def _hash_batch(endpoint_url: str | None, bucket: str, batch: list[S3Object],
                checksums: tuple[str, ...] = ()) -> list[ManifestEntry | UnreadableFile]:
    client = read_client(endpoint_url)  # each worker its own read-only client
    try:
        return [hash_object(client, bucket, o, checksums) for o in batch]
    finally:
        client.close()


def hash_all(bucket: str, objects: list[S3Object], *, jobs: int, scheduler: str | None,
              endpoint_url: str | None, tracker: Tracker,
              checksums: tuple[str, ...] = ()) -> Iterator[ManifestEntry | UnreadableFile]:
    if scheduler:
        from distributed import as_completed

        from ckptrescue.datasets.cluster import connect, plan_batches, worker_threads

        client = connect(scheduler)
        try:
            # by byte volume, as for files; objects are fetched one by one, so a batch holds at
            # most 1,000 of them (a small object costs a round trip, not bytes)
            planned = plan_batches(objects, max(1, worker_threads(client, scheduler)),
                                   max_files=1000)
            futures = [client.submit(_hash_batch, endpoint_url, bucket, b, checksums,
                                     pure=False) for b in planned]
            for fut in as_completed(futures, loop=client.loop):
                for outcome in fut.result():
                    tracker.add(files=1, nbytes=getattr(outcome, "size", 0) or 0)
                    yield outcome
                fut.release()
        finally:
            client.close()
        return
    batches = [objects[i:i + 64] for i in range(0, len(objects), 64)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for results in pool.map(lambda b: _hash_batch(endpoint_url, bucket, b, checksums),
                                batches):
            for outcome in results:
                tracker.add(files=1, nbytes=getattr(outcome, "size", 0) or 0)
                yield outcome


def build_manifest_s3(url: str, out: str | os.PathLike[str], *, jobs: int | None = None,
                      scheduler: str | None = None, progress: ProgressFn | None = None,
                      endpoint_url: str | None = None,
                      checksums: tuple[str, ...] = ()) -> ManifestResult:
    """SHA-256 of every object under ``url`` into ``out`` (sha256sum format) + ``out.jsonl``."""
    url = normalise(url)
    out_path = Path(out)
    started = time.monotonic()
    jobs = jobs or max(4, default_jobs())
    bucket, objects = list_objects(url, endpoint_url=endpoint_url)
    result = ManifestResult(root=url, manifest_path=str(out_path),
                            sidecar_path=str(sidecar_path(out_path)), jobs=jobs,
                            scheduler=scheduler)
    tracker = Tracker(len(objects), sum(o.size for o in objects), progress)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    entries = []
    for outcome in hash_all(bucket, objects, jobs=jobs, scheduler=scheduler,
                            endpoint_url=endpoint_url, tracker=tracker, checksums=checksums):
        if isinstance(outcome, ManifestEntry):
            entries.append(outcome)
            result.bytes_hashed += outcome.size
        else:
            result.unreadable.append(outcome)
    tracker.finish()
    result.entries = sorted(entries, key=lambda e: e.rel)
    write_outputs(out_path, result.entries)
    partial_path(out_path).unlink(missing_ok=True)
    result.elapsed_s = time.monotonic() - started
    record_manifest(result)
    return result


STORED = "stored-sha256"
DOWNLOADED = "downloaded"
_PARTS_SUFFIX = re.compile(r"-\d+$")


def full_object_sha256(head: dict[str, Any]) -> str | None:
    """Hex SHA-256 of the whole object from a HeadObject (``ChecksumMode=ENABLED``) response,
    or None when the store holds none we can trust as a hash of the whole object (the rule:
    :func:`full_object_crc`; S3 has no full-object SHA-256 for multipart uploads)."""
    value = full_object_crc(head, "SHA256")
    if value is None:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


def full_object_crc(head: dict[str, Any], algorithm: str) -> str | None:
    """The store's full-object ``Checksum<algorithm>`` (S3's Base64 form) from a HeadObject,
    or None.

    ``ChecksumType`` FULL_OBJECT is trusted, COMPOSITE never (a hash of part hashes). Without a
    ``ChecksumType`` (older stores; moto on single-part objects) the value counts as full-object
    only for a single-part object: no ``-N`` on the value or the ETag, no PartsCount.
    (CRC64NVME is always full-object on AWS, also for multipart uploads.)"""
    value = head.get(f"Checksum{algorithm}")
    if not isinstance(value, str):
        return None
    ctype = head.get("ChecksumType")
    if ctype is not None and str(ctype).upper() != "FULL_OBJECT":
        return None
    if ctype is None:
        etag = str(head.get("ETag") or "").strip().strip('"')
        if _PARTS_SUFFIX.search(value) or _PARTS_SUFFIX.search(etag) or head.get("PartsCount"):
            return None
    return value.strip()


def _head(client: Any, bucket: str, obj: S3Object) -> JsonObject | None:
    try:
        return dict(client.head_object(Bucket=bucket, Key=obj.key, ChecksumMode="ENABLED"))
    except Exception:  # noqa: BLE001 - the download then says what is wrong with the object
        return None


def stored_sha256(client: Any, bucket: str, obj: S3Object) -> tuple[str, int] | None:
    """(hex SHA-256, size) of ``obj`` as the store records it, without reading the object."""
    if obj.algorithms is not None and "SHA256" not in obj.algorithms:
        return None  # the listing already says there is no stored SHA-256
    head = _head(client, bucket, obj)
    sha = full_object_sha256(head) if head is not None else None
    if head is None or sha is None:
        return None
    return sha, int(head.get("ContentLength", obj.size))


Verified = tuple[ManifestEntry | UnreadableFile, str]
# what the manifest recorded for an object: (hex SHA-256, {CRC algorithm: S3 Base64 value})
Wanted = tuple[str, dict[str, str]]


def check_stored(client: Any, bucket: str, obj: S3Object,
                 want: Wanted | None) -> tuple[ManifestEntry, str] | None:
    """The object checked by what its store holds, without reading it: its full-object SHA-256
    (the entry carries the store's hash, whatever it is), else a full-object CRC the manifest
    also recorded and that matches (the entry then carries the manifest's SHA-256, vouched for
    by the CRC). None: nothing stored to compare, or a CRC that differs — download and hash."""
    crcs = (want[1] if want is not None else {}) or {}
    if obj.algorithms is not None and "SHA256" not in obj.algorithms \
            and not set(crcs) & set(obj.algorithms):
        return None  # the listing already says the store holds nothing we can use
    head = _head(client, bucket, obj)
    if head is None:
        return None
    size = int(head.get("ContentLength", obj.size))
    sha = full_object_sha256(head)
    if sha is not None:
        return ManifestEntry(obj.rel, size, obj.mtime_ns, sha), STORED
    for alg, value in sorted(crcs.items()):
        stored = full_object_crc(head, alg)
        if stored is not None and want is not None and stored == value:
            return ManifestEntry(obj.rel, size, obj.mtime_ns, want[0]), f"stored-{alg.lower()}"
    return None


def _audit_batch(endpoint_url: str | None, bucket: str, batch: list[S3Object],
                 use_stored: bool, wanted: dict[bytes, Wanted] | None = None
                 ) -> tuple[list[Verified], int]:
    """Each object checked by a stored checksum or downloaded; and the bytes downloaded."""
    from ckptrescue.stores.s3.client import stats

    client = read_client(endpoint_url)  # each worker its own read-only client
    out: list[Verified] = []
    try:
        for obj in batch:
            found = check_stored(client, bucket, obj, (wanted or {}).get(obj.rel)) \
                if use_stored else None
            if found is not None:
                out.append(found)
            else:
                out.append((hash_object(client, bucket, obj), DOWNLOADED))
    finally:
        client.close()
    return out, stats(client).bytes_downloaded


def _audit_all(bucket: str, objects: list[S3Object], *, jobs: int, scheduler: str | None,
               endpoint_url: str | None, use_stored: bool, tracker: Tracker,
               wanted: dict[bytes, Wanted] | None = None
               ) -> Iterator[tuple[list[Verified], int]]:
    batches = [objects[i:i + 64] for i in range(0, len(objects), 64)]

    def wanted_of(batch: list[S3Object]) -> dict[bytes, Wanted] | None:
        if not wanted:
            return None
        return {o.rel: wanted[o.rel] for o in batch if o.rel in wanted}

    def done(results: tuple[list[Verified], int]) -> tuple[list[Verified], int]:
        for outcome, _how in results[0]:
            tracker.add(files=1, nbytes=getattr(outcome, "size", 0) or 0)
        return results

    if scheduler:
        from ckptrescue.datasets.cluster import connect

        client = connect(scheduler)
        try:
            futures = [client.submit(_audit_batch, endpoint_url, bucket, b, use_stored,
                                     wanted_of(b), pure=False) for b in batches]
            for fut in futures:
                yield done(fut.result())
        finally:
            client.close()
        return
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for results in pool.map(lambda b: _audit_batch(endpoint_url, bucket, b, use_stored,
                                                       wanted_of(b)), batches):
            yield done(results)


@dataclass
class S3AuditResult(AuditResult):
    """An audit of an ``s3://`` prefix: also how each object was verified (``stored-sha256``:
    the store's full-object SHA-256, nothing read; ``downloaded``: read and hashed) and how many
    object bytes were downloaded in all (the read-only clients' ``stats()``)."""

    verified: dict[bytes, str] = field(default_factory=dict)
    bytes_downloaded: int = 0

    def answer(self) -> str:
        text = super().answer()
        if self.quick:
            return text
        stored = sum(1 for how in self.verified.values() if how == STORED)
        by_crc = sum(1 for how in self.verified.values() if how.startswith("stored-crc"))
        crc = f", {by_crc} against a stored CRC" if by_crc else ""
        return (f"{text}; {stored} checked against the store's SHA-256{crc}, "
                f"{len(self.verified) - stored - by_crc} downloaded "
                f"({self.bytes_downloaded} bytes read)")

    def to_json(self) -> JsonObject:
        out = super().to_json()
        for row, audited in zip(out["files"], self.files, strict=True):
            if audited.rel in self.verified:
                row["verified"] = self.verified[audited.rel]
        out["bytes_downloaded"] = self.bytes_downloaded
        return out


def audit_s3(url: str, manifest: str | os.PathLike[str], *, quick: bool = False,
             jobs: int | None = None, scheduler: str | None = None,
             progress: ProgressFn | None = None,
             endpoint_url: str | None = None, use_stored: bool = True) -> S3AuditResult:
    """Audit the objects under ``url`` against ``manifest`` (statuses as for a directory).

    Objects whose store holds a full-object SHA-256 are checked against it without being read
    (``use_stored=False`` downloads everything); the others are downloaded and hashed."""
    url = normalise(url)
    started = time.monotonic()
    expected, has_sizes = load_expected(manifest)
    if quick and not has_sizes:
        raise UsageError(f"{manifest}: --quick needs the JSON-lines sidecar (sizes)")
    bucket, objects = list_objects(url, endpoint_url=endpoint_url)
    present = {o.rel: o for o in objects}
    result = S3AuditResult(root=url, manifest=str(manifest), quick=quick)
    rows: list[AuditRow] = []
    todo: list[S3Object] = []
    for rel, exp in sorted(expected.items()):
        found = present.get(rel)
        if found is None:
            rows.append(AuditRow(rel, "missing", exp.sha256, None))
        elif exp.size is not None and exp.size != found.size:
            rows.append(AuditRow(rel, "changed", exp.sha256, None,
                                 reason=f"size {found.size}, expected {exp.size}"))
        elif quick:
            rows.append(AuditRow(rel, "ok", exp.sha256, None))
        else:
            todo.append(found)
    tracker = Tracker(len(todo), sum(o.size for o in todo), progress)
    wanted = _recorded_crcs(manifest, expected) if use_stored and todo else None
    for batch, downloaded in _audit_all(bucket, todo, jobs=jobs or 8, scheduler=scheduler,
                                        endpoint_url=endpoint_url, use_stored=use_stored,
                                        tracker=tracker, wanted=wanted):
        result.bytes_downloaded += downloaded
        for outcome, how in batch:
            exp = expected[outcome.rel]
            result.verified[outcome.rel] = how
            if isinstance(outcome, UnreadableFile):
                rows.append(AuditRow(outcome.rel, "unreadable", exp.sha256, None,
                                     offset=outcome.offset, error=outcome.error))
            elif outcome.sha256 == exp.sha256.lower():
                rows.append(AuditRow(outcome.rel, "ok", exp.sha256, outcome.sha256))
            else:
                status = "corrupted" if exp.size in (None, outcome.size) else "changed"
                reason = "the store's SHA-256 differs" if how == STORED else (
                    "the store's CRC differs" if how.startswith("stored-") else "")
                rows.append(AuditRow(outcome.rel, status, exp.sha256, outcome.sha256,
                                     reason=reason))
    tracker.finish()
    rows += [AuditRow(o.rel, "new", None, None) for rel, o in present.items()
             if rel not in expected]
    result.files = sorted(rows, key=lambda r: r.rel)
    result.elapsed_s = time.monotonic() - started
    stored = sum(1 for how in result.verified.values() if how == STORED)
    by_crc = sum(1 for how in result.verified.values() if how.startswith("stored-crc"))
    downloaded = len(result.verified) - stored - by_crc
    if not quick:
        result.notes.append(f"{stored} object(s) checked against the store's full-object "
                            f"SHA-256 and {by_crc} against a stored CRC the manifest also "
                            f"records, without reading them; {downloaded} downloaded "
                            f"({result.bytes_downloaded} bytes)")
    result.record("manifest.audit", {"root": url, "manifest": str(manifest),
                                     "counts": result.counts, "quick": quick,
                                     "stored_sha256": stored, "stored_crc": by_crc,
                                     "downloaded": downloaded,
                                     "bytes_downloaded": result.bytes_downloaded})
    return result


def _recorded_crcs(manifest: str | os.PathLike[str],
                   expected: dict[bytes, Any]) -> dict[bytes, Wanted] | None:
    """The CRCs the manifest's sidecar recorded (``manifest build --checksums``), joined to the
    manifest's SHA-256 (a sidecar row whose SHA-256 disagrees with the manifest is ignored)."""
    from ckptrescue.datasets.manifest_files import read_jsonl_entries, sidecar_path

    side = Path(manifest) if str(manifest).endswith(".jsonl") else sidecar_path(manifest)
    if not side.is_file():
        return None
    out: dict[bytes, Wanted] = {}
    for e in read_jsonl_entries(side):
        exp = expected.get(e.rel)
        if e.checksums and exp is not None and exp.sha256.lower() == e.sha256:
            out[e.rel] = (exp.sha256.lower(), e.checksums)
    return out or None


ProgressCallback = Callable[..., None]
