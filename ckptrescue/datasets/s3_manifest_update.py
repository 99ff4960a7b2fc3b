"""``manifest update s3://bucket/prefix``: re-hash only objects the store says have changed.

An object is re-read when it is new, or when its size or its ETag differs from what the
manifest's JSON-lines sidecar recorded (the ETag changes whenever the object's content is
written again: for a single-part upload it is the MD5 of the bytes, for a multipart upload a
hash of the parts). A sidecar written before ETags were recorded compares size and
LastModified instead. Every other entry is reused; entries of objects that are gone are dropped
and listed. Each re-hashed entry records the ETag and version id of the exact version that was
read. The manifest is replaced as for a directory (old pair kept as ``MANIFEST.prev``; an
interruption leaves the old manifest whole). The bucket is only read.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ckptrescue.datasets.manifest_files import (
    ManifestEntry,
    default_jobs,
    read_jsonl_entries,
)
from ckptrescue.datasets.manifest_update import (
    UpdateResult,
    finish_update,
    prev_path,
    recorded_checksums,
    require_manifest,
)
from ckptrescue.datasets.progress import ProgressFn, Tracker
from ckptrescue.datasets.s3dataset import S3Object, hash_all, list_objects, normalise


def unchanged(prev: ManifestEntry, now: S3Object) -> bool:
    """The sidecar's entry still describes the object listed now."""
    if prev.size != now.size:
        return False
    if prev.etag is not None and now.etag is not None:
        return prev.etag == now.etag
    return prev.mtime_ns == now.mtime_ns


def update_manifest_s3(url: str, manifest: str, *, jobs: int | None = None,
                       scheduler: str | None = None, progress: ProgressFn | None = None,
                       endpoint_url: str | None = None,
                       cancel: threading.Event | None = None) -> UpdateResult:
    url = normalise(url)
    out = Path(manifest)
    side = require_manifest(out, "sizes and ETags")
    started = time.monotonic()
    old = {e.rel: e for e in read_jsonl_entries(side)}
    bucket, objects = list_objects(url, endpoint_url=endpoint_url)
    result = UpdateResult(root=url, manifest_path=str(out), sidecar_path=str(side),
                          previous_path=str(prev_path(out)))
    result.inode_checked = False  # objects have no inodes: ETag (or LastModified) instead
    checksums = recorded_checksums(old.values())
    keep: dict[bytes, ManifestEntry] = {}
    todo: list[S3Object] = []
    for obj in objects:
        prev = old.get(obj.rel)
        if prev is not None and unchanged(prev, obj) and \
                set(prev.checksums or ()) >= set(checksums):
            keep[obj.rel] = prev if prev.etag is not None else ManifestEntry(
                prev.rel, prev.size, prev.mtime_ns, prev.sha256, prev.format,
                etag=obj.etag, version_id=prev.version_id, checksums=prev.checksums)
            continue
        (result.changed if prev is not None else result.new).append(obj.rel)
        todo.append(obj)
    present = {o.rel for o in objects}
    result.deleted = sorted(rel for rel in old if rel not in present)
    result.reused = len(keep)
    tracker = Tracker(len(todo), sum(o.size for o in todo), progress, cancel=cancel)
    hashed = hash_all(bucket, todo, jobs=jobs or max(4, default_jobs()), scheduler=scheduler,
                      endpoint_url=endpoint_url, tracker=tracker, checksums=checksums)
    return finish_update(result, keep, hashed, tracker, out, started)
