"""``manifest build``: SHA-256 of every file under a directory, streaming and parallel.

Writes ``OUT`` in ``sha256sum -c`` format (names relative to DIR, so ``cd DIR && sha256sum -c
OUT`` checks it) and ``OUT.jsonl``, one JSON object per file: path, size, mtime, sha256, format.
While it runs, finished files are appended to ``OUT.partial.jsonl``; a build that was interrupted
picks them up again (same size and mtime) instead of rehashing. DIR is never written to.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.detect import detect
from ckptrescue.datasets.hashing import hash_file
from ckptrescue.datasets.progress import ProgressFn, Tracker
from ckptrescue.datasets.walk import (
    FileEntry,
    Skipped,
    display,
    from_json_path,
    join,
    shown_path,
    to_json_path,
    walk,
)
from ckptrescue.errors import EvidenceError, UsageError
from ckptrescue.model import Finding, Severity

if TYPE_CHECKING:
    from ckptrescue.case import Case

SIDECAR_SUFFIX = ".jsonl"
PARTIAL_SUFFIX = ".partial.jsonl"


@dataclass(frozen=True)
class ManifestEntry:
    """One manifest row."""

    rel: bytes
    size: int
    mtime_ns: int
    sha256: str
    format: str = "other"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": to_json_path(self.rel),
            "size": self.size,
            "mtime": self.mtime_ns / 1e9,
            "mtime_ns": self.mtime_ns,
            "sha256": self.sha256,
            "format": self.format,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ManifestEntry:
        mtime_ns = data.get("mtime_ns")
        if mtime_ns is None:
            mtime_ns = int(float(data.get("mtime", 0)) * 1e9)
        return cls(from_json_path(str(data["path"])), int(data["size"]), int(mtime_ns),
                   str(data["sha256"]).lower(), str(data.get("format", "other")))


@dataclass(frozen=True)
class UnreadableFile:
    rel: bytes
    error: str
    offset: int | None

    def to_json(self) -> dict[str, Any]:
        return {"path": to_json_path(self.rel), "error": self.error, "offset": self.offset}


@dataclass
class ManifestResult:
    """What ``build_manifest`` wrote and what it could not hash."""

    root: str
    manifest_path: str
    sidecar_path: str
    entries: list[ManifestEntry] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    unreadable: list[UnreadableFile] = field(default_factory=list)
    resumed: int = 0
    bytes_hashed: int = 0
    elapsed_s: float = 0.0
    jobs: int = 1
    scheduler: str | None = None

    @property
    def ok(self) -> bool:
        return not self.unreadable

    def findings(self) -> list[Finding]:
        out = [
            Finding("MF005", Severity.ERROR,
                    f"{display(u.rel)}: unreadable ({u.error}) at offset {u.offset}",
                    evidence=shown_path(self.root, u.rel), offset=u.offset,
                    source="manifest.build", details={"error": u.error})
            for u in self.unreadable
        ]
        out += [
            Finding("MF006", Severity.INFO, f"{display(s.rel)}: skipped: {s.reason}",
                    evidence=shown_path(self.root, s.rel), source="manifest.build")
            for s in self.skipped
        ]
        return out

    def formats(self) -> dict[str, int]:
        """How many files of each container format (from names and first bytes)."""
        counts: dict[str, int] = {}
        for e in self.entries:
            counts[e.format] = counts.get(e.format, 0) + 1
        return dict(sorted(counts.items()))

    def answer(self) -> str:
        size = sum(e.size for e in self.entries)
        text = (f"{len(self.entries)} files ({size} bytes) in {self.manifest_path}; "
                f"{len(self.unreadable)} unreadable, {len(self.skipped)} skipped")
        if self.resumed:
            text += f"; {self.resumed} taken over from the interrupted build"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "manifest": self.manifest_path,
            "sidecar": self.sidecar_path,
            "files": len(self.entries),
            "bytes": sum(e.size for e in self.entries),
            "bytes_hashed": self.bytes_hashed,
            "resumed": self.resumed,
            "elapsed_s": round(self.elapsed_s, 3),
            "jobs": self.jobs,
            "scheduler": self.scheduler,
            "formats": self.formats(),
            "unreadable": [u.to_json() for u in self.unreadable],
            "skipped": [{"path": to_json_path(s.rel), "reason": s.reason} for s in self.skipped],
            "answer": self.answer(),
        }


# -- hashing one file: shared by the thread pool and the Dask workers ---------------------------
def hash_entry(root: bytes, entry: FileEntry, tracker: Tracker | None = None, *,
               formats: bool = True) -> ManifestEntry | UnreadableFile:
    path = join(root, entry.rel)
    on_bytes = (lambda n: tracker.add(nbytes=n)) if tracker is not None else None
    outcome = hash_file(path, on_bytes=on_bytes)
    if outcome.sha256 is None:
        return UnreadableFile(entry.rel, outcome.error or "read failed", outcome.error_offset)
    fmt = detect(entry.rel, outcome.head) if formats else "other"
    return ManifestEntry(entry.rel, outcome.size, entry.mtime_ns, outcome.sha256, fmt)


def hash_entries(root: bytes, entries: list[FileEntry], formats: bool = True
                 ) -> list[ManifestEntry | UnreadableFile]:
    """Hash a batch sequentially (the unit of work sent to a cluster worker)."""
    return [hash_entry(root, e, formats=formats) for e in entries]


def default_jobs() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 8))


# -- manifest files -----------------------------------------------------------------------------
def sidecar_path(manifest: str | os.PathLike[str]) -> Path:
    return Path(str(manifest) + SIDECAR_SUFFIX)


def partial_path(manifest: str | os.PathLike[str]) -> Path:
    return Path(str(manifest) + PARTIAL_SUFFIX)


def read_jsonl_entries(path: Path) -> Iterator[ManifestEntry]:
    """Entries of a sidecar or partial file; a torn last line (interrupted write) is ignored."""
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break
            try:
                yield ManifestEntry.from_json(json.loads(raw))
            except (ValueError, KeyError, TypeError):
                continue


def _check_paths(root: Path, out: Path) -> None:
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


def build_manifest(
    dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    progress: ProgressFn | None = None,
    case: Case | None = None,
    endpoint_url: str | None = None,
) -> ManifestResult:
    """Hash every file under ``dir`` into ``out`` (sha256sum format) and ``out.jsonl``.

    ``dir`` may be an ``s3://bucket/prefix``: the objects are hashed where they live.
    """
    from ckptrescue.datasets.s3dataset import build_manifest_s3, is_s3

    if is_s3(dir):
        return build_manifest_s3(str(dir), out, jobs=jobs, scheduler=scheduler,
                                 progress=progress, case=case, endpoint_url=endpoint_url)
    root, out_path = Path(dir), Path(out)
    _check_paths(root, out_path)
    started = time.monotonic()
    jobs = jobs or default_jobs()
    listing = walk(root)
    partial = partial_path(out_path)
    done: dict[bytes, ManifestEntry] = {}
    if partial.exists():
        previous = {e.rel: e for e in read_jsonl_entries(partial)}
        for f in listing.files:
            prev = previous.get(f.rel)
            if prev is not None and prev.size == f.size and prev.mtime_ns == f.mtime_ns:
                done[f.rel] = prev
    todo = [f for f in listing.files if f.rel not in done]
    result = ManifestResult(root=str(root), manifest_path=str(out_path),
                            sidecar_path=str(sidecar_path(out_path)), skipped=listing.skipped,
                            resumed=len(done), jobs=jobs, scheduler=scheduler)
    tracker = Tracker(len(todo), sum(f.size for f in todo), progress)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    root_b = os.fsencode(root)
    with partial.open("ab") as log:
        # a partial file with nothing usable is emptied; a usable one is appended to, so that a
        # second interruption still keeps everything finished so far
        if not done:
            log.truncate(0)
        elif _ends_torn(partial):
            log.write(b"\n")
        for outcome in hash_many(root_b, todo, jobs=jobs, scheduler=scheduler, tracker=tracker):
            if isinstance(outcome, ManifestEntry):
                done[outcome.rel] = outcome
                result.bytes_hashed += outcome.size
                log.write(json.dumps(outcome.to_json()).encode() + b"\n")
                log.flush()
            else:
                result.unreadable.append(outcome)
    tracker.finish()
    result.entries = sorted(done.values(), key=lambda e: e.rel)
    result.unreadable.sort(key=lambda u: u.rel)
    _write_outputs(out_path, result.entries)
    partial.unlink()
    result.elapsed_s = time.monotonic() - started
    if case is not None:
        _record(case, result)
    return result


def hash_many(root: bytes, todo: list[FileEntry], *, jobs: int, scheduler: str | None,
              formats: bool = True,
              tracker: Tracker) -> Iterable[ManifestEntry | UnreadableFile]:
    if scheduler:
        from ckptrescue.datasets.cluster import map_batches

        fn = functools.partial(hash_entries, formats=formats)
        for batch_result in map_batches(scheduler, fn, root, todo):
            for item in batch_result:
                tracker.add(files=1, nbytes=item.size if isinstance(item, ManifestEntry) else 0)
                yield item
        return
    if jobs == 1:
        for f in todo:
            item = hash_entry(root, f, tracker, formats=formats)
            tracker.add(files=1)
            yield item
        return
    # Small files go in groups (one task per file costs more than hashing a 1 KiB file);
    # a bounded window of in-flight groups keeps memory flat on trees of millions of files.
    from ckptrescue.datasets.cluster import batches

    groups = iter(batches(todo, max_bytes=32 << 20, max_files=64))
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="sha256") as pool:
        pending: deque[Future[list[ManifestEntry | UnreadableFile]]] = deque()
        for group in groups:
            pending.append(pool.submit(_hash_group, root, group, tracker, formats))
            if len(pending) >= jobs * 4:
                break
        while pending:
            for item in pending.popleft().result():
                tracker.add(files=1)
                yield item
            group = next(groups, None)
            if group is not None:
                pending.append(pool.submit(_hash_group, root, group, tracker, formats))


def _hash_group(root: bytes, group: list[FileEntry], tracker: Tracker,
                formats: bool) -> list[ManifestEntry | UnreadableFile]:
    return [hash_entry(root, e, tracker, formats=formats) for e in group]


def _ends_torn(path: Path) -> bool:
    """True when the file's last line lacks its newline (a write cut by the interruption)."""
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return False
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


def _write_outputs(out: Path, entries: list[ManifestEntry]) -> None:
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("wb") as fh:
        for e in entries:
            fh.write(sha256sum_format.format_line(e.sha256, e.rel))
        fh.flush()
        os.fsync(fh.fileno())
    side = sidecar_path(out)
    side_tmp = side.with_name(side.name + ".tmp")
    with side_tmp.open("wb") as fh:
        for e in entries:
            fh.write(json.dumps(e.to_json()).encode() + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    side_tmp.replace(side)
    tmp.replace(out)


def _record(case: Case, result: ManifestResult) -> None:
    artifacts = [
        case.store_artifact_file(Path(result.manifest_path), kind="manifest"),
        case.store_artifact_file(Path(result.sidecar_path), kind="manifest-sidecar"),
    ]
    summary = result.to_json()
    summary["skipped"] = len(result.skipped)
    case.log("manifest.build", summary, artifacts=artifacts)
    case.add_findings(result.findings())
