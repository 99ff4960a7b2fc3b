"""Datasets that live in S3: ``manifest build`` and ``manifest audit`` of an ``s3://`` prefix.

Objects are listed and streamed through SHA-256 with the kit's read-only client (nothing is
written to disk or to the bucket); names in the manifest are keys relative to the prefix, so
the same manifest audits a local copy or the bucket. With ``--scheduler`` each Dask worker opens
its own read-only client and hashes its share of the keys where they live (in S3).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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

_CHUNK = 1 << 20


def is_s3(location: str | os.PathLike[str]) -> bool:
    text = str(location)
    return text.startswith(("s3://", "s3:/"))


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


def _client(endpoint_url: str | None) -> Any:
    from ckptrescue.s3.client import make_client

    return make_client(endpoint_url=endpoint_url)


def list_objects(url: str, *, endpoint_url: str | None = None) -> tuple[str, list[S3Object]]:
    """(bucket, objects under the prefix) with keys relative to the prefix."""
    from ckptrescue.s3.client import translate_error
    from ckptrescue.s3.urls import parse_s3_url

    parsed = parse_s3_url(url)
    prefix = parsed.key if not parsed.key or parsed.key.endswith("/") else parsed.key + "/"
    client = _client(endpoint_url)
    out: list[S3Object] = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=parsed.bucket,
                                                                      Prefix=prefix):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                if key.endswith("/"):
                    continue  # a "folder" marker object
                mtime = obj["LastModified"].timestamp()
                out.append(S3Object(key[len(prefix):].encode(), key, int(obj["Size"]),
                                    int(mtime * 1e9)))
    except Exception as exc:  # botocore errors become one-line kit errors
        raise translate_error(exc, url) from exc
    return parsed.bucket, sorted(out, key=lambda o: o.rel)


def hash_object(client: Any, bucket: str, obj: S3Object) -> ManifestEntry | UnreadableFile:
    digest = hashlib.sha256()
    size = 0
    try:
        body = client.get_object(Bucket=bucket, Key=obj.key)["Body"]
        for block in body.iter_chunks(_CHUNK):
            digest.update(block)
            size += len(block)
    except Exception as exc:  # a read error of one object is a row, not the end of the run
        return UnreadableFile(obj.rel, f"{type(exc).__name__}: {exc}", size)
    return ManifestEntry(obj.rel, size, obj.mtime_ns, digest.hexdigest())


def _hash_batch(endpoint_url: str | None, bucket: str,
                batch: list[S3Object]) -> list[ManifestEntry | UnreadableFile]:
    client = _client(endpoint_url)  # each worker its own read-only client
    return [hash_object(client, bucket, o) for o in batch]


def _hash_all(bucket: str, objects: list[S3Object], *, jobs: int, scheduler: str | None,
              endpoint_url: str | None,
              tracker: Tracker) -> Iterator[ManifestEntry | UnreadableFile]:
    batches = [objects[i:i + 64] for i in range(0, len(objects), 64)]
    if scheduler:
        from ckptrescue.datasets.cluster import connect

        client = connect(scheduler)
        try:
            futures = [client.submit(_hash_batch, endpoint_url, bucket, b, pure=False)
                       for b in batches]
            for fut in futures:
                for outcome in fut.result():
                    tracker.add(files=1, nbytes=getattr(outcome, "size", 0) or 0)
                    yield outcome
        finally:
            client.close()
        return
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for results in pool.map(lambda b: _hash_batch(endpoint_url, bucket, b), batches):
            for outcome in results:
                tracker.add(files=1, nbytes=getattr(outcome, "size", 0) or 0)
                yield outcome


def build_manifest_s3(url: str, out: str | os.PathLike[str], *, jobs: int | None = None,
                      scheduler: str | None = None, progress: ProgressFn | None = None,
                      endpoint_url: str | None = None) -> ManifestResult:
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
    for outcome in _hash_all(bucket, objects, jobs=jobs, scheduler=scheduler,
                             endpoint_url=endpoint_url, tracker=tracker):
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


def audit_s3(url: str, manifest: str | os.PathLike[str], *, quick: bool = False,
             jobs: int | None = None, scheduler: str | None = None,
             progress: ProgressFn | None = None,
             endpoint_url: str | None = None) -> AuditResult:
    """Audit the objects under ``url`` against ``manifest`` (statuses as for a directory)."""
    url = normalise(url)
    started = time.monotonic()
    expected, has_sizes = load_expected(manifest)
    if quick and not has_sizes:
        raise UsageError(f"{manifest}: --quick needs the JSON-lines sidecar (sizes)")
    bucket, objects = list_objects(url, endpoint_url=endpoint_url)
    present = {o.rel: o for o in objects}
    result = AuditResult(root=url, manifest=str(manifest), quick=quick)
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
    for outcome in _hash_all(bucket, todo, jobs=jobs or 8, scheduler=scheduler,
                             endpoint_url=endpoint_url, tracker=tracker):
        exp = expected[outcome.rel]
        if isinstance(outcome, UnreadableFile):
            rows.append(AuditRow(outcome.rel, "unreadable", exp.sha256, None,
                                 offset=outcome.offset, error=outcome.error))
        elif outcome.sha256 == exp.sha256:
            rows.append(AuditRow(outcome.rel, "ok", exp.sha256, outcome.sha256))
        else:
            status = "corrupted" if exp.size in (None, outcome.size) else "changed"
            rows.append(AuditRow(outcome.rel, status, exp.sha256, outcome.sha256))
    tracker.finish()
    rows += [AuditRow(o.rel, "new", None, None) for rel, o in present.items()
             if rel not in expected]
    result.files = sorted(rows, key=lambda r: r.rel)
    result.elapsed_s = time.monotonic() - started
    result.record("manifest.audit", {"root": url, "manifest": str(manifest),
                                     "counts": result.counts, "quick": quick})
    return result


ProgressCallback = Callable[..., None]
