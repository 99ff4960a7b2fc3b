"""Manifest records and files, shared by the local builder (``manifest.py``), the S3 builder
(``s3dataset.py``) and the auditors: one manifest row, an unreadable file, a build's result, the
``OUT`` / ``OUT.jsonl`` / ``OUT.partial.jsonl`` paths and how a finished build is written and
what it asks the engine to record in the case. It imports neither builder, so the builders do
not import each other's internals.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, overload

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.walk import Skipped, display, from_json_path, shown_path, to_json_path
from ckptrescue.model import ArtifactData, Finding, JsonObject, Recorded, Severity
from ckptrescue.record.atomic import replacing_all

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
    # local files only: ``manifest update`` re-hashes a file whose inode changed
    inode: int | None = field(default=None, compare=False)
    # objects only: the ETag and version id of the exact object version that was hashed
    # (``manifest update s3://`` re-hashes an object whose ETag, version or size changed)
    etag: str | None = field(default=None, compare=False)
    version_id: str | None = field(default=None, compare=False)
    # ``manifest build --checksums``: CRCs of the same bytes in S3's Base64 form, so an audit
    # of the uploaded objects can compare the store's own full-object CRC without a download
    checksums: dict[str, str] | None = field(default=None, compare=False)
    # local files only: how many times the file changed while it was hashed (and was hashed
    # again); not part of the manifest or its sidecar
    changed: int = field(default=0, compare=False)

    def to_json(self) -> JsonObject:
        out: dict[str, Any] = {
            "path": to_json_path(self.rel),
            "size": self.size,
            "mtime": self.mtime_ns / 1e9,
            "mtime_ns": self.mtime_ns,
            "sha256": self.sha256,
            "format": self.format,
        }
        if self.inode is not None:
            out["inode"] = self.inode
        if self.etag is not None:
            out["etag"] = self.etag
        if self.version_id is not None:
            out["version_id"] = self.version_id
        if self.checksums:
            out["checksums"] = dict(sorted(self.checksums.items()))
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> ManifestEntry:
        mtime_ns = data.get("mtime_ns")
        if mtime_ns is None:
            mtime_ns = int(float(data.get("mtime", 0)) * 1e9)
        inode = data.get("inode")
        return cls(from_json_path(str(data["path"])), int(data["size"]), int(mtime_ns),
                   str(data["sha256"]).lower(), str(data.get("format", "other")),
                   int(inode) if inode is not None else None,
                   _opt_str(data.get("etag")), _opt_str(data.get("version_id")),
                   _checksums(data.get("checksums")))


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _checksums(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {str(k).upper(): str(v) for k, v in value.items() if isinstance(v, str)} or None


@dataclass(frozen=True)
class UnreadableFile:
    """A file the build could not read to the end: the error and the offset it stopped at."""

    rel: bytes
    error: str
    offset: int | None

    def to_json(self) -> JsonObject:
        return {"path": to_json_path(self.rel), "error": self.error, "offset": self.offset}


@dataclass
class ManifestResult(Recorded):
    """What ``build_manifest`` wrote and what it could not hash."""

    root: str
    manifest_path: str
    sidecar_path: str
    entries: list[ManifestEntry] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    unreadable: list[UnreadableFile] = field(default_factory=list)
    # files that changed while they were hashed and were hashed again: (name, times)
    changed: list[tuple[bytes, int]] = field(default_factory=list)
    resumed: int = 0
    bytes_hashed: int = 0
    elapsed_s: float = 0.0
    jobs: int = 1
    scheduler: str | None = None
    # fail closed: entries skipped (never hashed) leave the manifest short of the tree; they
    # fail the build unless accepted
    allow_unverified: bool = False

    @property
    def ok(self) -> bool:
        return not self.unreadable and (not self.skipped or self.allow_unverified)

    def findings(self) -> list[Finding]:
        out = [
            Finding("MF005", Severity.ERROR,
                    f"{display(u.rel)}: unreadable ({u.error}) at offset {u.offset}",
                    evidence=shown_path(self.root, u.rel), offset=u.offset,
                    source="manifest.build", details={"error": u.error})
            for u in self.unreadable
        ]
        out += [
            Finding("MF008", Severity.WARNING,
                    f"{display(rel)}: changed while it was hashed ({n} time(s)); hashed again "
                    "from a stable state", evidence=shown_path(self.root, rel),
                    source="manifest.build", details={"times": n})
            for rel, n in self.changed
        ]
        severity = Severity.INFO if self.allow_unverified else Severity.WARNING
        out += [
            Finding("MF006", severity, f"{display(s.rel)}: skipped: {s.reason} (not in the "
                    "manifest: unverified)", evidence=shown_path(self.root, s.rel),
                    source="manifest.build")
            for s in self.skipped
        ]
        return out

    def formats(self) -> dict[str, int]:
        """How many files of each container format (from names and first bytes)."""
        counts: dict[str, int] = {}
        for e in self.entries:
            counts[e.format] = counts.get(e.format, 0) + 1
        return dict(sorted(counts.items()))

    def file_count(self) -> int:
        return len(self.entries)

    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def answer(self) -> str:
        text = (f"{self.file_count()} files ({self.total_bytes()} bytes) in "
                f"{self.manifest_path}; {len(self.unreadable)} unreadable, "
                f"{len(self.skipped)} skipped")
        if self.skipped:
            text += (" (not in the manifest: unverified"
                     + ("; accepted with --allow-unverified)" if self.allow_unverified else
                        "; --allow-unverified accepts them)"))
        if self.resumed:
            text += f"; {self.resumed} taken over from the interrupted build"
        return text

    def to_json(self) -> JsonObject:
        return {
            "root": self.root,
            "manifest": self.manifest_path,
            "sidecar": self.sidecar_path,
            "files": self.file_count(),
            "bytes": self.total_bytes(),
            "bytes_hashed": self.bytes_hashed,
            "resumed": self.resumed,
            "elapsed_s": round(self.elapsed_s, 3),
            "jobs": self.jobs,
            "scheduler": self.scheduler,
            "formats": self.formats(),
            "unreadable": [u.to_json() for u in self.unreadable],
            "changed_while_hashed": [{"path": to_json_path(rel), "times": n}
                                     for rel, n in self.changed],
            "skipped": [{"path": to_json_path(s.rel), "reason": s.reason} for s in self.skipped],
            "allow_unverified": self.allow_unverified,
            "answer": self.answer(),
        }


def default_jobs() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 8))


def sidecar_path(manifest: str | os.PathLike[str]) -> Path:
    return Path(str(manifest) + SIDECAR_SUFFIX)


def partial_path(manifest: str | os.PathLike[str]) -> Path:
    return Path(str(manifest) + PARTIAL_SUFFIX)


def read_jsonl_entries(path: Path | IO[bytes]) -> Iterator[ManifestEntry]:
    """Entries of a sidecar or partial file (a path, or a file open for reading, read from
    where it stands); a torn last line (interrupted write) is ignored."""
    with (path.open("rb") if isinstance(path, Path) else contextlib.nullcontext(path)) as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break
            try:
                yield ManifestEntry.from_json(json.loads(raw))
            except (ValueError, KeyError, TypeError):
                continue


def refuse_outputs(paths: Iterable[Path], *, says: str) -> None:
    """Each of ``paths`` is a file the command may replace (nothing, a regular file or a
    link): found before an hour of hashing, not at the rename after it. A device node, a
    FIFO or a socket is the kit's refusal (exit 3); a folder or a path under a file, a usage
    error that ``says`` what the paths are for."""
    from ckptrescue.errors import UsageError, os_error_line
    from ckptrescue.record.atomic import refuse_non_regular

    for path in paths:
        try:
            refuse_non_regular(path)
        except OSError as exc:
            raise UsageError(f"{os_error_line(exc)}; {says}") from None


def write_outputs(out: Path, entries: list[ManifestEntry]) -> None:
    """OUT and its sidecar, each written atomically, neither renamed until both are whole (the
    sidecar first)."""
    with replacing_all(sidecar_path(out), out) as (side, text):
        for e in entries:
            text.write(sha256sum_format.format_line(e.sha256, e.rel))
            side.write(json.dumps(e.to_json()).encode() + b"\n")


def manifest_artifacts(result: Recorded, manifest_path: str, sidecar_path: str) -> list[Any]:
    """The manifest and its sidecar stored as the step's artifacts (build and update)."""
    return [
        result.store(ArtifactData.of_file(manifest_path, name=Path(manifest_path).name,
                                          kind="manifest")),
        result.store(ArtifactData.of_file(sidecar_path, name=Path(sidecar_path).name,
                                          kind="manifest-sidecar")),
    ]


def record_manifest(result: ManifestResult) -> None:
    """The ``manifest.build`` record and the two files as artifacts, for the engine."""
    artifacts = manifest_artifacts(result, result.manifest_path, result.sidecar_path)
    summary = result.to_json()
    summary["skipped"] = len(result.skipped)
    result.record("manifest.build", summary, artifacts=artifacts)


# -- a build too large to hold: its entries stay in the sidecar --------------------------------
class SidecarEntries(Sequence[ManifestEntry]):
    """A finished build's entries, read from its sidecar each time they are iterated (nothing
    per file is held: a local build of 100 million files returns this, not a list)."""

    def __init__(self, sidecar: Path, count: int) -> None:
        self.sidecar = sidecar
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[ManifestEntry]:
        return read_jsonl_entries(self.sidecar)

    @overload
    def __getitem__(self, index: int) -> ManifestEntry: ...

    @overload
    def __getitem__(self, index: slice) -> list[ManifestEntry]: ...

    def __getitem__(self, index: int | slice) -> ManifestEntry | list[ManifestEntry]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(index)
        for i, entry in enumerate(self):
            if i == index:
                return entry
        raise IndexError(index)


@dataclass
class StoredManifestResult(ManifestResult):
    """A :class:`ManifestResult` whose totals were counted while the outputs were written and
    whose ``entries`` are read back from the sidecar on demand (the local build's result)."""

    files: int = 0
    nbytes: int = 0
    format_counts: dict[str, int] = field(default_factory=dict)

    def formats(self) -> dict[str, int]:
        return dict(sorted(self.format_counts.items()))

    def file_count(self) -> int:
        return self.files

    def total_bytes(self) -> int:
        return self.nbytes


def write_output_rows(out: Path, rows: Iterable[tuple[bytes, str, bytes]]) -> None:
    """:func:`write_outputs` from a stream of (name, sha256, sidecar line without its newline)
    in name order: both files written in one pass, each fsynced and moved into place (the
    sidecar first, as :func:`write_outputs` does: :func:`record.atomic.replacing_all`)."""
    with replacing_all(sidecar_path(out), out) as (side, text):
        for rel, sha256, line in rows:
            text.write(sha256sum_format.format_line(sha256, rel))
            side.write(line + b"\n")
