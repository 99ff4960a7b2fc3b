"""``manifest update``: bring a manifest up to date, hashing only what changed.

A file is re-hashed when it is new, or when its size, mtime or inode differs from what the
manifest's JSON-lines sidecar recorded (a sidecar written before inodes were recorded compares
size and mtime only); every other entry is reused. Entries of files that are gone are dropped
and listed. The new manifest and sidecar are written to temporary files in the manifest's
directory, fsynced and renamed over the old ones; the old pair is kept as ``MANIFEST.prev`` and
``MANIFEST.prev.jsonl``. An update that is interrupted leaves the old manifest as it was.
DIR is never written to.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.manifest import check_paths, hash_many
from ckptrescue.datasets.manifest_files import (
    ManifestEntry,
    UnreadableFile,
    default_jobs,
    manifest_artifacts,
    read_jsonl_entries,
    refuse_outputs,
    sidecar_path,
)
from ckptrescue.datasets.progress import ProgressFn, Tracker
from ckptrescue.datasets.walk import FileEntry, Skipped, display, shown_path, to_json_path, walk
from ckptrescue.errors import UsageError, named, naming
from ckptrescue.model import Finding, JsonObject, Recorded, Severity

PREV_SUFFIX = ".prev"


def prev_path(manifest: str | os.PathLike[str]) -> Path:
    return Path(str(manifest) + PREV_SUFFIX)


@dataclass
class UpdateResult(Recorded):
    """What ``update_manifest`` hashed, reused and dropped."""

    root: str
    manifest_path: str
    sidecar_path: str
    previous_path: str
    files: int = 0
    hashed: int = 0
    reused: int = 0
    bytes_hashed: int = 0
    new: list[bytes] = field(default_factory=list)
    changed: list[bytes] = field(default_factory=list)
    deleted: list[bytes] = field(default_factory=list)
    unreadable: list[UnreadableFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    inode_checked: bool = True
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.unreadable

    def answer(self) -> str:
        text = (f"{self.files} files in {self.manifest_path}: {self.hashed} hashed "
                f"({len(self.new)} new, {len(self.changed)} changed), {self.reused} reused, "
                f"{len(self.deleted)} deleted entries dropped")
        if self.unreadable:
            text += f"; {len(self.unreadable)} unreadable (left out)"
        return text

    def findings(self) -> list[Finding]:
        out = [Finding("MF005", Severity.ERROR,
                       f"{display(u.rel)}: unreadable ({u.error}) at offset {u.offset}",
                       evidence=shown_path(self.root, u.rel), offset=u.offset,
                       source="manifest.update", details={"error": u.error})
               for u in self.unreadable]
        out += [Finding("MF006", Severity.INFO, f"{display(s.rel)}: skipped: {s.reason}",
                        evidence=shown_path(self.root, s.rel), source="manifest.update")
                for s in self.skipped]
        return out

    def to_json(self) -> JsonObject:
        return {
            "root": self.root,
            "manifest": self.manifest_path,
            "sidecar": self.sidecar_path,
            "previous": self.previous_path,
            "files": self.files,
            "hashed": self.hashed,
            "reused": self.reused,
            "bytes_hashed": self.bytes_hashed,
            "new": [to_json_path(r) for r in self.new],
            "changed": [to_json_path(r) for r in self.changed],
            "deleted": [to_json_path(r) for r in self.deleted],
            "unreadable": [u.to_json() for u in self.unreadable],
            "skipped": [{"path": to_json_path(s.rel), "reason": s.reason}
                        for s in self.skipped],
            "inode_checked": self.inode_checked,
            "elapsed_s": round(self.elapsed_s, 3),
            "answer": self.answer(),
        }


def require_manifest(out: Path, compared: str) -> Path:
    """The sidecar of ``out``; one-line errors when the manifest or its sidecar is missing."""
    side = sidecar_path(out)
    if not out.is_file():
        raise UsageError(f"{out}: manifest not found (write one with `manifest build`)")
    if not side.is_file():
        raise UsageError(f"{side}: no JSON-lines sidecar: the {compared} an update "
                         "compares are not recorded (run `manifest build` once)")
    return side


def recorded_checksums(entries: Iterable[ManifestEntry]) -> tuple[str, ...]:
    """The CRC algorithms the manifest's entries carry (``manifest build --checksums``)."""
    names: set[str] = set()
    for e in entries:
        if e.checksums:
            names.update(e.checksums)
    return tuple(sorted(names))


def _unchanged(prev: ManifestEntry, now: FileEntry) -> bool:
    if prev.size != now.size or prev.mtime_ns != now.mtime_ns:
        return False
    return prev.inode is None or now.inode is None or prev.inode == now.inode


def update_manifest(
    dir: str | os.PathLike[str],
    manifest: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    endpoint_url: str | None = None,
) -> UpdateResult:
    """Update ``manifest`` (and its sidecar) for the files under ``dir`` now.

    ``dir`` may be ``s3://bucket/prefix``: objects are compared by size and ETag
    (``s3_manifest_update``)."""
    from ckptrescue.datasets.build_store import writing
    from ckptrescue.stores.urls import is_s3

    if is_s3(dir):
        from ckptrescue.datasets.s3_manifest_update import update_manifest_s3

        check_update_outputs(Path(manifest))
        with writing(Path(manifest)):  # one writer of a manifest at a time
            return update_manifest_s3(str(dir), str(manifest), jobs=jobs,
                                      scheduler=scheduler, progress=progress,
                                      endpoint_url=endpoint_url, cancel=cancel)
    root, out = Path(dir), Path(manifest)
    if "://" in str(dir):
        raise UsageError(f"{dir}: manifest update works on local directories and s3:// "
                         "prefixes only")
    check_paths(root, out)
    check_update_outputs(out)
    with writing(out):  # one writer of a manifest at a time
        return _update_local(root, out, jobs=jobs, scheduler=scheduler, progress=progress,
                             cancel=cancel)


def _update_local(root: Path, out: Path, *, jobs: int | None, scheduler: str | None,
                  progress: ProgressFn | None, cancel: threading.Event | None) -> UpdateResult:
    side = require_manifest(out, "sizes and mtimes")
    started = time.monotonic()
    old = {e.rel: e for e in read_jsonl_entries(side)}
    listing = walk(root)
    result = UpdateResult(root=str(root), manifest_path=str(out), sidecar_path=str(side),
                          previous_path=str(prev_path(out)), skipped=listing.skipped)
    result.inode_checked = all(e.inode is not None for e in old.values())
    # the CRCs the manifest records are kept up to date on the files hashed again
    checksums = recorded_checksums(old.values())
    keep: dict[bytes, ManifestEntry] = {}
    todo: list[FileEntry] = []
    for f in listing.files:
        prev = old.get(f.rel)
        if prev is not None and _unchanged(prev, f) and \
                set(prev.checksums or ()) >= set(checksums):
            keep[f.rel] = prev if prev.inode is not None or f.inode is None else \
                ManifestEntry(prev.rel, prev.size, prev.mtime_ns, prev.sha256, prev.format,
                              f.inode, checksums=prev.checksums)
            continue
        (result.changed if prev is not None else result.new).append(f.rel)
        todo.append(f)
    present = {f.rel for f in listing.files}
    result.deleted = sorted(rel for rel in old if rel not in present)
    result.reused = len(keep)
    tracker = Tracker(len(todo), sum(f.size for f in todo), progress, cancel=cancel)
    hashed = hash_many(os.fsencode(root), todo, jobs=jobs or default_jobs(),
                       scheduler=scheduler, tracker=tracker, checksums=checksums)
    return finish_update(result, keep, hashed, tracker, out, started)


def finish_update(result: UpdateResult, keep: dict[bytes, ManifestEntry],
                  hashed: Iterable[ManifestEntry | UnreadableFile], tracker: Tracker, out: Path,
                  started: float) -> UpdateResult:
    """Take the hashed entries in, replace the manifest, record the update (shared with the
    object-store update)."""
    for item in hashed:
        if isinstance(item, ManifestEntry):
            keep[item.rel] = item
            result.hashed += 1
            result.bytes_hashed += item.size
        else:
            result.unreadable.append(item)
    tracker.finish()
    result.unreadable.sort(key=lambda u: u.rel)
    entries = sorted(keep.values(), key=lambda e: e.rel)
    result.files = len(entries)
    replace_outputs(out, entries)
    result.elapsed_s = time.monotonic() - started
    record_update(result)
    return result


def _write_temp(target: Path, chunks: Iterable[bytes], *, mode_of: Path | None = None) -> Path:
    """Write ``chunks`` to a new temporary file beside ``target``, fsynced; returns its path."""
    try:  # the mode of the file it replaces (a manifest kept 0600 stays so), else build's
        mode = os.stat(mode_of or target).st_mode & 0o777
    except OSError:
        mode = 0o644
    from ckptrescue.effects.files import fsync, named_file

    with naming(target):
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with named_file(fd, "wb", target) as fh:  # a full disk names the file it replaces
            for chunk in chunks:
                fh.write(chunk)
            fsync(fh)
        os.chmod(name, mode)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _copy_temp(source: Path, target: Path) -> Path:
    """A copy of ``source`` beside ``target``, with ``source``'s mode."""
    with source.open("rb") as src:
        return _write_temp(target, iter(lambda: src.read(1 << 20), b""), mode_of=source)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_update_outputs(out: Path) -> None:
    """The four names an update replaces (MANIFEST, its sidecar, the .prev pair), checked
    before any object or file is hashed (local and S3 alike)."""
    prev = prev_path(out)
    refuse_outputs((out, sidecar_path(out), prev, sidecar_path(prev)),
                   says="manifest update replaces MANIFEST and its sidecar, and keeps the old "
                        f"pair as {prev.name} and {sidecar_path(prev).name}")


def replace_outputs(out: Path, entries: list[ManifestEntry]) -> None:
    """Keep the old pair as ``.prev``, then rename the new pair over the old one.

    Every file is complete and fsynced before any rename; until the last rename, ``out`` is the
    old manifest, so an interruption anywhere leaves a manifest that is either wholly the old
    one or wholly the new one (the sidecar is renamed first: an audit joins a sidecar row to a
    manifest line only when their SHA-256 agree)."""
    side = sidecar_path(out)
    prev = prev_path(out)
    temps: list[Path] = []
    try:
        temps.append(_copy_temp(out, prev))
        temps.append(_copy_temp(side, sidecar_path(prev)))
        temps.append(_write_temp(side, (json.dumps(e.to_json()).encode() + b"\n"
                                        for e in entries)))
        temps.append(_write_temp(out, (sha256sum_format.format_line(e.sha256, e.rel)
                                       for e in entries)))
        from ckptrescue.record.atomic import refuse_non_regular

        prev_tmp, prev_side_tmp, side_tmp, out_tmp = temps
        moves = [(prev_tmp, prev), (prev_side_tmp, sidecar_path(prev)), (side_tmp, side),
                 (out_tmp, out)]
        for _tmp, target in moves:  # checked before the run too; again before any rename
            refuse_non_regular(target)
        for tmp, target in moves:
            try:
                os.replace(tmp, target)
            except OSError as exc:  # the name asked for, not the temp file's
                raise named(exc, target, replace=True) from None
        temps.clear()
        _fsync_dir(out.parent)
    finally:
        for t in temps:
            t.unlink(missing_ok=True)


def record_update(result: UpdateResult) -> None:
    artifacts = manifest_artifacts(result, result.manifest_path, result.sidecar_path)
    summary = result.to_json()
    for key in ("new", "changed", "deleted", "skipped"):
        summary[key] = len(summary[key])
    summary["deleted_paths"] = [to_json_path(r) for r in result.deleted[:1000]]
    result.record("manifest.update", summary, artifacts=artifacts)
