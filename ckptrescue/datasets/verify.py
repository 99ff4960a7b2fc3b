"""``dataset verify``: container checks of every file under a directory, needing no manifest.

Picks the checker by :func:`~ckptrescue.datasets.detect.detect`, runs it over a tracked reader
(an I/O error becomes status ``unreadable`` with the offset of the first bad block), and merges
the per-file results. Files of other formats are listed as ``unchecked``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ckptrescue.datasets import (
    arrow_ipc,
    hf_cache,
    jsonl,
    mds,
    megatron_indexed,
    npy,
    parquet,
    tarshards,
    tfrecord,
)
from ckptrescue.datasets.decompress import (
    Decompressed,
    LimitReached,
    compression_of,
    peek,
    strip_suffix,
)
from ckptrescue.datasets.detect import HEAD_BYTES, detect
from ckptrescue.datasets.manifest import default_jobs
from ckptrescue.datasets.shardcheck import (
    BadRecord,
    CheckOutcome,
    FileCheck,
    UnreadableAt,
    failure_of,
    open_tracked,
    read_exact,
)
from ckptrescue.datasets.walk import FileEntry, display, join, shown_path, walk
from ckptrescue.errors import EvidenceError, ToolMissingError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity

# ``checker(fh, size[, outcome])``: the STREAMED ones fill the ``outcome`` they are given (kept
# when a decompression limit stops them half way); every checker returns its outcome.
Checker = Callable[..., CheckOutcome]
CHECKERS: dict[str, Checker] = {
    "tfrecord": tfrecord.check,
    "tar": tarshards.check,
    "parquet": parquet.check,
    "jsonl": jsonl.check,
    "npy": npy.check_npy,
    "npz": npy.check_npz,
    "arrow": arrow_ipc.check,
    "mds": mds.check,
}
# formats checked from their path (partner files, a directory's JSON against its files)
PATH_CHECKERS: dict[str, Callable[[str], CheckOutcome]] = {
    "megatron": megatron_indexed.check_path,  # the .idx with its .bin
    "mds-index": mds.check_index_path,  # every shard's presence, size and hashes
    "hf-datasets": hf_cache.check_path,  # state.json / dataset_info.json against the files
}
_CODES = {"tfrecord": "DS001", "tar": "DS002", "parquet": "DS003", "jsonl": "DS004",
          "npy": "DS005", "npz": "DS005", "arrow": "DS010", "megatron": "DS011",
          "mds": "DS012", "mds-index": "DS012", "hf-datasets": "DS013"}


@dataclass
class DatasetVerifyResult(Recorded):
    root: str
    files: list[FileCheck] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        counts = {"ok": 0, "damaged": 0, "unreadable": 0, "unchecked": 0}
        for f in self.files:
            counts[f.status] += 1
        return counts

    @property
    def not_checked(self) -> list[FileCheck]:
        """Files of a format ``verify`` checks that could not be checked (fully)."""
        return [f for f in self.files if f.status == "unchecked" and f.format != "other"]

    @property
    def ok(self) -> bool:
        """Nothing damaged or unreadable, and every file of a checked format was checked."""
        return not any(f.status in ("damaged", "unreadable") for f in self.files) \
            and not self.not_checked

    def answer(self) -> str:
        c = self.counts
        checked = c["ok"] + c["damaged"] + c["unreadable"]
        bad = c["damaged"] + c["unreadable"]
        records = sum(len(f.bad_records) for f in self.files)
        head = (f"all {checked} checked files are intact" if not bad else
                f"{bad} of {checked} checked files are damaged or unreadable "
                f"({records} bad records)")
        missed = len(self.not_checked)
        if missed:
            head += (f"; {missed} file(s) of checked formats could NOT be checked "
                     "(reasons listed)")
        return head + f"; {c['unchecked'] - missed} file(s) of other formats not checked"

    def lines(self) -> list[str]:
        out = []
        for f in self.files:
            if f.status == "ok" or (f.status == "unchecked" and f.format == "other"):
                continue  # other formats are counted in the answer line, not listed
            tail = f" ({f.note})" if f.note else ""
            out.append(f"{f.status.upper():<10} {f.format:<14} {display(f.rel)}{tail}")
            for b in f.bad_records:
                where = ", ".join(p for p in (
                    f"record {b.index}" if b.index is not None else "",
                    f"offset {b.offset}" if b.offset is not None else "",
                    f"key {b.key}" if b.key else "") if p)
                out.append(f"    {where}: {b.problem}")
        return out

    def findings(self) -> list[Finding]:
        out = []
        for f in self.not_checked:
            out.append(Finding("DS009" if f.limit else "DS008", Severity.WARNING,
                               f"{display(f.rel)}: not checked: {f.note}",
                               evidence=shown_path(self.root, f.rel), source="dataset.verify",
                               details={"format": f.format, "records_checked": f.records}))
        for f in self.files:
            if f.status not in ("damaged", "unreadable"):
                continue
            code = "DS006" if f.status == "unreadable" else _CODES.get(f.format.split("+")[0],
                                                                        "DS007")
            sev = Severity.ERROR
            for b in f.bad_records:
                out.append(Finding(code, sev, f"{display(f.rel)}: {b.problem}",
                                   evidence=shown_path(self.root, f.rel), offset=b.offset,
                                   source="dataset.verify",
                                   details={"format": f.format, "index": b.index, "key": b.key}))
        return out

    def to_json(self) -> JsonObject:
        return {"files": [f.to_json() for f in self.files], "counts": self.counts,
                "answer": self.answer()}


# formats whose checkers read a stream front to back (so a decompressed stream works)
STREAMED = {"tfrecord", "tar", "jsonl", "npy", "mds"}


def _detect(rel: bytes, head: bytes, fh: IO[bytes]) -> tuple[str, str | None]:
    """(format, compression) by content: a compressed file is named by what it holds, so
    ``data_tfrecord-00000-of-00012.gz`` is a gzip TFRecord whatever its name says."""
    kind = compression_of(head)
    if kind is None:
        return detect(rel, head), None
    base = strip_suffix(os.fsencode(rel).rsplit(b"/", 1)[-1].lower())
    try:
        inner_head = peek(fh, kind, HEAD_BYTES)
    except ToolMissingError:
        inner_head = b""  # judged by its name alone; the checker says why it cannot run
    inner = detect(base, inner_head)
    return (f"{inner}+{kind}" if inner != "other" else "other"), kind


def check_file(root: bytes, entry: FileEntry) -> FileCheck:
    """Check one file (the unit of work for threads and cluster workers)."""
    path = join(root, entry.rel)
    try:
        fh = open_tracked(path)
    except OSError as exc:
        return FileCheck(entry.rel, "other", "unreadable",
                         [BadRecord(None, 0, None, f"cannot open: {exc.strerror}")])
    with fh:
        try:
            head = read_exact(fh, HEAD_BYTES)
            fh.seek(0)
            fmt, kind = _detect(entry.rel, head, fh)
        except UnreadableAt as exc:
            return _unreadable(entry.rel, "other", exc, 0)
        base = fmt.split("+")[0]
        if base in PATH_CHECKERS and kind is None:
            try:
                outcome = PATH_CHECKERS[base](os.fsdecode(path))
            except UnreadableAt as exc:
                return _unreadable(entry.rel, fmt, exc, 0)
            except Exception as exc:  # a checker bug must not lose the other files' results
                return FileCheck(entry.rel, fmt, "unchecked", note=f"internal error in the "
                                 f"{base} checker: {type(exc).__name__}: {exc}")
            return _outcome(entry.rel, fmt, outcome)
        checker = CHECKERS.get(base)
        if checker is None:
            return FileCheck(entry.rel, fmt, "unchecked", note="format not checked")
        if kind is not None and base not in STREAMED:
            return FileCheck(entry.rel, fmt, "unchecked",
                             note=f"{kind}-compressed {base} files are not checked")
        outcome = CheckOutcome()
        try:
            if kind is not None:
                stream = Decompressed(fh, kind)
                try:
                    checker(stream, None, outcome)
                except LimitReached as exc:
                    outcome.unchecked_reason = str(exc)
                    outcome.limit = True
                finally:
                    stream.close()
                outcome.bad += frame_damage(stream, base)
            elif base in STREAMED:
                checker(fh, entry.size, outcome)
            else:  # parquet, npz: checkers that return their outcome
                outcome = checker(fh, entry.size)
        except UnreadableAt as exc:
            return _unreadable(entry.rel, fmt, exc, outcome.records)
        except ToolMissingError as exc:  # e.g. pyarrow absent: this format cannot be checked
            return FileCheck(entry.rel, fmt, "unchecked", note=f"{exc.message} ({exc.hint})")
        except Exception as exc:  # a checker bug must not lose the other files' results
            return FileCheck(entry.rel, fmt, "unchecked", outcome.bad, outcome.records,
                             note=f"internal error in the {base} checker: "
                                  f"{type(exc).__name__}: {exc}")
        failure = failure_of(fh)
        if failure is not None:  # a library caught our I/O error and reported something else
            return _unreadable(entry.rel, fmt, failure, outcome.records)
    return _outcome(entry.rel, fmt, outcome)


def frame_damage(stream: Decompressed, base: str) -> list[BadRecord]:
    """The damaged members/frames of a decompressed stream as bad records (whole-file records:
    ``index`` None), naming the compressed byte range and the lines (JSON lines) or
    decompressed bytes they held; trailing zeros after a gzip TFRecord (``tf.data`` refuses
    them: ``DataLossError``)."""
    bad = [BadRecord(None, d.start, None, d.describe(lines=base == "jsonl"))
           for d in stream.damaged]
    if stream.error and not stream.damaged:
        bad.append(BadRecord(None, None, None, f"{stream.kind} stream damaged: {stream.error}"))
    if stream.trailing is not None and base == "tfrecord" and not stream.damaged:
        offset, length, _zeros = stream.trailing
        bad.append(BadRecord(None, offset, None, f"{length} zero byte(s) after the last "
                             f"{stream.kind} member (compressed bytes {offset}-"
                             f"{offset + length - 1}): tf.data stops there with a "
                             "DataLossError"))
    return bad


def _outcome(rel: bytes, fmt: str, outcome: CheckOutcome) -> FileCheck:
    if outcome.bad:
        return FileCheck(rel, fmt, "damaged", outcome.bad, outcome.records,
                         note=outcome.unchecked_reason or "")
    if outcome.unchecked_reason:
        return FileCheck(rel, fmt, "unchecked", records=outcome.records,
                         note=outcome.unchecked_reason, limit=outcome.limit)
    return FileCheck(rel, fmt, "ok", records=outcome.records)


def _unreadable(rel: bytes, fmt: str, exc: UnreadableAt, records: int) -> FileCheck:
    return FileCheck(rel, fmt, "unreadable",
                     [BadRecord(None, exc.offset, None, f"I/O error: {exc.error}")], records,
                     note=f"{exc.error} at offset {exc.offset}")


def check_files(root: bytes, entries: list[FileEntry]) -> list[FileCheck]:
    return [check_file(root, e) for e in entries]


def verify_dataset(
    dir: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
) -> DatasetVerifyResult:
    """Check every file under ``dir`` (read-only)."""
    root = Path(dir)
    if not root.is_dir():
        raise EvidenceError(f"{root}: not a directory")
    started = time.monotonic()
    listing = walk(root)
    root_b = os.fsencode(root)
    result = DatasetVerifyResult(root=str(root))
    items: Iterable[FileCheck]
    if scheduler:
        from ckptrescue.datasets.cluster import map_batches

        items = (c for batch in map_batches(scheduler, check_files, root_b, listing.files)
                 for c in batch)
        result.files = list(items)
    else:
        with ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
            result.files = list(pool.map(lambda e: check_file(root_b, e), listing.files))
    result.files.sort(key=lambda f: f.rel)
    result.elapsed_s = time.monotonic() - started
    result.record("dataset.verify", {"root": result.root, "counts": result.counts,
                                     "answer": result.answer()})
    return result
