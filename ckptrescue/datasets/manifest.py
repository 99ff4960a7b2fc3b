"""``manifest build``: SHA-256 of every file under a directory, streaming and parallel.

Writes ``OUT`` in ``sha256sum -c`` format (names relative to DIR, so ``cd DIR && sha256sum -c
OUT`` checks it) and ``OUT.jsonl``, one JSON object per file: path, size, mtime, sha256, format.
While it runs, finished files are appended to ``OUT.partial.jsonl``; a build that was interrupted
picks them up again (same size and mtime) instead of rehashing. DIR is never written to.

Memory stays flat in the number of files: the walk, the resume join and the finished entries
live in a scratch SQLite database beside OUT (``OUT.build.sqlite``, see :mod:`build_store`;
removed when the build ends), the files are hashed in chunks read from it in name order, and
the two outputs are written from one ordered scan of it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from ckptrescue.datasets import build_store
from ckptrescue.datasets.build_store import BuildStore, store_path
from ckptrescue.datasets.detect import detect
from ckptrescue.datasets.hashing import ReadPlan, hash_file
from ckptrescue.datasets.manifest_files import (
    PARTIAL_SUFFIX,
    SIDECAR_SUFFIX,
    ManifestEntry,
    ManifestResult,
    SidecarEntries,
    StoredManifestResult,
    UnreadableFile,
    default_jobs,
    partial_path,
    read_jsonl_entries,
    record_manifest,
    refuse_outputs,
    sidecar_path,
    write_output_rows,
)
from ckptrescue.datasets.ordered_pool import map_ordered
from ckptrescue.datasets.progress import ProgressFn, Tracker
from ckptrescue.datasets.walk import FileEntry, join
from ckptrescue.errors import EvidenceError, UsageError, database
from ckptrescue.stores.urls import is_s3

# the records and file helpers live in manifest_files (shared with the S3 builder); these names
# stay importable from here
__all__ = [
    "PARTIAL_SUFFIX", "SIDECAR_SUFFIX", "ManifestEntry", "ManifestResult", "UnreadableFile",
    "build_manifest", "check_paths", "default_jobs", "hash_entries", "hash_entry", "hash_many",
    "partial_path", "read_jsonl_entries", "sidecar_path",
]


# -- hashing one file: shared by the thread pool and the Dask workers ---------------------------
def hash_entry(root: bytes, entry: FileEntry, tracker: Tracker | None = None, *,
               formats: bool = True, checksums: tuple[str, ...] = (),
               prefetch: bool | ReadPlan = False) -> ManifestEntry | UnreadableFile:
    path = join(root, entry.rel)
    on_bytes = (lambda n: tracker.add(nbytes=n)) if tracker is not None else None
    outcome = hash_file(path, on_bytes=on_bytes, checksums=checksums, prefetch=prefetch)
    if outcome.sha256 is None:
        return UnreadableFile(entry.rel, outcome.error or "read failed", outcome.error_offset)
    fmt = detect(entry.rel, outcome.head) if formats else "other"
    # the size and mtime of the file as it was hashed (it may have changed since the walk)
    return ManifestEntry(entry.rel, outcome.size, outcome.mtime_ns or entry.mtime_ns,
                         outcome.sha256, fmt, outcome.inode or entry.inode,
                         checksums=outcome.checksums, changed=outcome.changed)


def hash_entries(root: bytes, entries: list[FileEntry], formats: bool = True,
                 checksums: tuple[str, ...] = ()) -> list[ManifestEntry | UnreadableFile]:
    """Hash a batch sequentially (the unit of work sent to a cluster worker)."""
    return [hash_entry(root, e, formats=formats, checksums=checksums) for e in entries]


def check_output(out: Path) -> None:
    """OUT, its sidecar and its partial file (:func:`refuse_outputs`). The partial file is the
    build's own record, appended to: a link there is refused (it would be followed, and the
    file it points to emptied), and it is opened without following one
    (:func:`_open_partial`)."""
    from ckptrescue.errors import RefusedError

    partial = partial_path(out)
    refuse_outputs((out, sidecar_path(out), partial, store_path(out)),
                   says=f"-o names the manifest file to write ({sidecar_path(out).name}, "
                        f"{partial.name} and {store_path(out).name} go beside it)")
    for own in (partial, store_path(out)):  # the build's own files: opened without following
        if own.is_symlink():
            raise RefusedError(f"{own}: a symbolic link where the build keeps its own file; it "
                               "is never followed: remove it, or choose another -o")


def check_paths(root: Path, out: Path) -> None:
    """DIR is a directory and OUT lies outside it."""
    if not root.is_dir():
        raise EvidenceError(f"{root}: not a directory")
    real_root = os.path.realpath(root)
    real_out = os.path.realpath(out)
    if real_out == real_root or real_out.startswith(real_root.rstrip("/") + "/"):
        raise UsageError(
            f"{out}: the manifest would be written inside {root}",
            hint="the dataset is evidence and is never written to: put the manifest elsewhere "
                 "(sha256sum -c works from DIR with a manifest anywhere)",
        )


def _open_partial(partial: Path) -> BinaryIO:
    """The partial file, opened for reading and appending without following a link, and only
    when it is a regular file (:func:`effects.files.open_own_file`)."""
    from ckptrescue.effects.files import named_file, open_own_file

    # its write errors (a full disk) name it
    return named_file(open_own_file(partial, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644),
                      "a+b", partial)


def build_manifest(
    dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    progress: ProgressFn | None = None,
    endpoint_url: str | None = None,
    cancel: threading.Event | None = None,
    checksums: tuple[str, ...] = (),
) -> ManifestResult:
    """Hash every file under ``dir`` into ``out`` (sha256sum format) and ``out.jsonl``.

    ``dir`` may be an ``s3://bucket/prefix``: the objects are hashed where they live.
    ``cancel`` set stops a local build as Ctrl-C does (KeyboardInterrupt; finished files stay
    in the partial file for the resume). ``checksums`` (CRC64NVME, CRC32C, CRC32) are computed
    in the same pass and recorded in the sidecar, in S3's form, so that an audit of the uploaded
    objects can use the store's own CRCs.
    """
    checksums = normal_checksums(checksums)
    if is_s3(dir):
        check_output(Path(out))
        from ckptrescue.datasets.s3dataset import build_manifest_s3

        with build_store.writing(Path(out)):  # one writer of a manifest at a time
            return build_manifest_s3(str(dir), out, jobs=jobs, scheduler=scheduler,
                                     progress=progress, endpoint_url=endpoint_url,
                                     checksums=checksums)
    root, out_path = Path(dir), Path(out)
    check_paths(root, out_path)
    check_output(out_path)
    started = time.monotonic()
    jobs = jobs or default_jobs()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # the scratch database's errors say what they are and which file (a full disk: ENOSPC)
    with database(store_path(out_path)):
        store = BuildStore.create(out_path, root)
        try:
            result = _build_local(store, root, out_path, jobs=jobs, scheduler=scheduler,
                                  progress=progress, cancel=cancel, checksums=checksums)
        finally:
            store.remove()
    result.elapsed_s = time.monotonic() - started
    record_manifest(result)
    return result


def _build_local(store: BuildStore, root: Path, out_path: Path, *, jobs: int,
                 scheduler: str | None, progress: ProgressFn | None,
                 cancel: threading.Event | None,
                 checksums: tuple[str, ...]) -> StoredManifestResult:
    """The local build over its scratch store (see :mod:`build_store`): walk streamed in,
    the partial file joined for the resume, the rest hashed in chunks read from SQL, the
    outputs written from one ordered scan. Nothing per file stays in Python."""
    skipped = store.load_walk(root, cancel)
    partial = partial_path(out_path)
    with _open_partial(partial) as log:
        # the resume reads through the descriptor just opened, never through whatever was put
        # at the name during the walk (a link, a FIFO)
        size = os.fstat(log.fileno()).st_size
        resumed = 0
        if size:
            # a duplicate shares the offset with ``log``: harmless, its writes are O_APPEND
            with os.fdopen(os.dup(log.fileno()), "rb") as src:
                src.seek(0)
                resumed = store.resume_from(src, checksums)
        files_left, bytes_left = store.todo_totals()
        result = StoredManifestResult(root=str(root), manifest_path=str(out_path),
                                      sidecar_path=str(sidecar_path(out_path)),
                                      skipped=skipped, resumed=resumed, jobs=jobs,
                                      scheduler=scheduler)
        tracker = Tracker(files_left, bytes_left, progress, cancel=cancel)
        root_b = os.fsencode(root)
        writer = store.writer()
        chunk_files = (build_store.CLUSTER_CHUNK_FILES if scheduler
                       else build_store.HASH_CHUNK_FILES)
        # a partial file with nothing usable is emptied; a usable one is appended to, so that a
        # second interruption still keeps everything finished so far
        if not resumed:
            log.truncate(0)
        elif os.pread(log.fileno(), 1, size - 1) != b"\n":  # torn by the interruption
            log.write(b"\n")
        for chunk in store.todo_chunks(chunk_files):
            for outcome in hash_many(root_b, chunk, jobs=jobs, scheduler=scheduler,
                                     tracker=tracker, checksums=checksums):
                if isinstance(outcome, ManifestEntry):
                    if outcome.changed:
                        result.changed.append((outcome.rel, outcome.changed))
                    line = json.dumps(outcome.to_json()).encode()
                    result.bytes_hashed += outcome.size
                    log.write(line + b"\n")
                    log.flush()
                    writer.add(outcome, line)
                else:
                    result.unreadable.append(outcome)
    writer.flush()
    tracker.finish()
    result.unreadable.sort(key=lambda u: u.rel)
    counts: dict[str, int] = {}

    def rows() -> Iterator[tuple[bytes, str, bytes]]:
        for rel, sha256, size, fmt, line in store.finished():
            result.files += 1
            result.nbytes += size
            counts[fmt] = counts.get(fmt, 0) + 1
            yield rel, sha256, line

    # closed here, while the store is open, whatever the write does (a full disk)
    with contextlib.closing(rows()) as stream:
        write_output_rows(out_path, stream)
    result.format_counts = counts
    result.entries = SidecarEntries(sidecar_path(out_path), result.files)  # type: ignore[assignment]
    partial.unlink()
    return result


def hash_many(root: bytes, todo: list[FileEntry], *, jobs: int, scheduler: str | None,
              formats: bool = True, tracker: Tracker,
              checksums: tuple[str, ...] = ()) -> Iterable[ManifestEntry | UnreadableFile]:
    if scheduler:
        from ckptrescue.datasets.cluster import map_batches

        fn = functools.partial(hash_entries, formats=formats, checksums=checksums)
        for batch_result in map_batches(scheduler, fn, root, todo):
            for item in batch_result:
                tracker.add(files=1, nbytes=item.size if isinstance(item, ManifestEntry) else 0)
                yield item
        return
    # a core left idle by the jobs may read ahead for them (the page-cache copy off the hashing
    # thread), where timing both ways shows that faster (hashing.ReadPlan); with a job per core
    # there is none to spare and each job reads for itself
    prefetch: ReadPlan | bool = ReadPlan() if jobs < len(os.sched_getaffinity(0)) else False
    if jobs == 1:
        for f in todo:
            item = hash_entry(root, f, tracker, formats=formats, checksums=checksums,
                              prefetch=prefetch)
            tracker.add(files=1)
            yield item
        return
    # Small files go in groups (one task per file costs more than hashing a 1 KiB file);
    # a bounded window of in-flight groups keeps memory flat on trees of millions of files.
    from ckptrescue.datasets.cluster import batches

    groups = batches(todo, max_bytes=32 << 20, max_files=64)
    hash_group = functools.partial(_hash_group, root, tracker=tracker, formats=formats,
                                   checksums=checksums, prefetch=prefetch)
    for items in map_ordered(hash_group, groups, workers=jobs, window=jobs * 4, name="sha256"):
        for item in items:
            tracker.add(files=1)
            yield item


def _hash_group(root: bytes, group: list[FileEntry], *, tracker: Tracker, formats: bool,
                checksums: tuple[str, ...], prefetch: bool | ReadPlan,
                ) -> list[ManifestEntry | UnreadableFile]:
    return [hash_entry(root, e, tracker, formats=formats, checksums=checksums,
                       prefetch=prefetch) for e in group]


def normal_checksums(names: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """``--checksums`` names, upper case, deduplicated, checked (one-line error otherwise)."""
    from ckptrescue.datasets.hashing import checksum_hashers

    out = tuple(dict.fromkeys(str(n).strip().upper() for n in names or () if str(n).strip()))
    checksum_hashers(out)  # unknown names and a missing awscrt fail here, before any work
    return out

