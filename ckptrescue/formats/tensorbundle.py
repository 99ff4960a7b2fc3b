"""TensorFlow TensorBundle checkpoints (``PREFIX.index`` + ``PREFIX.data-NNNNN-of-MMMMM``).

Who calls it: the generic checkpoint probe (``ckptrescue.probes.checkpoints``) through
``FORMATS``, SavedModel (its ``variables/variables`` bundle), ``salvage`` through
:meth:`TensorBundleFormat.iter_verified_tensors`.

No TensorFlow import: the ``.index`` SSTable is parsed by :mod:`sstable`, entries by
:mod:`tensorbundle_entries`, every stored piece (a variable, or a slice of a sliced variable;
sliced parents carry no bytes and are skipped) is CRC32C-verified streaming by
:mod:`tensorbundle_verify`, continuing past every error and naming each variable.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from ckptrescue.checkpoint import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.formats.sstable import is_sstable
from ckptrescue.formats.tf_checkpoint_state import findings_for_prefix
from ckptrescue.formats.tensorbundle_entries import DTYPES, BundleEntry
from ckptrescue.formats.tensorbundle_index import (
    DATA_RE,
    BundleIndex,
    data_files,
    index_path,
    prefix_of,
    read_index,
    shard_path,
)
from ckptrescue.formats.tensorbundle_verify import verify_piece
from ckptrescue.formats.tf_findings import (
    numeric_findings,
    numeric_scan,
    reference_findings,
    verdict_from,
)
from ckptrescue.model import Finding, Severity

FORMAT = "tf-tensorbundle"
TEMPSTATE_RE = re.compile(r"\.tempstate\d*$")


def piece_name(entry: BundleEntry) -> str:
    return entry.parent or entry.key


def piece_storage(entry: BundleEntry, n_shards: int) -> str:
    base = f"shard {entry.shard_id}/{n_shards}"
    return f"{base} slice[{entry.slice.text()}]" if entry.slice is not None else base


def leftover_findings(prefix: Path) -> list[Finding]:
    """``PREFIX_temp/`` folders and ``*.tempstate*`` files of this prefix (interrupted save)."""
    out = []
    temp = prefix.with_name(prefix.name + "_temp")
    if temp.is_dir():
        out.append(Finding("TB008", Severity.WARNING,
                           f"interrupted-save folder {temp.name}/ left behind", evidence=str(temp),
                           source="tensorbundle"))
    if prefix.parent.is_dir():
        for p in sorted(prefix.parent.iterdir()):
            if p.name.startswith(prefix.name + ".") and TEMPSTATE_RE.search(p.name):
                out.append(Finding("TB008", Severity.WARNING,
                                   f"temporary file {p.name} left by an interrupted save",
                                   evidence=str(p), source="tensorbundle"))
    return out


@dataclass
class _Shard:
    path: Path
    size: int | None
    fh: BinaryIO | None


def _open_shards(prefix: Path, n: int) -> dict[int, _Shard]:
    shards = {}
    for i in range(n):
        p = shard_path(prefix, i, n)
        try:
            fh: BinaryIO | None = p.open("rb")
            size: int | None = p.stat().st_size
        except OSError:
            fh, size = None, None
        shards[i] = _Shard(p, size, fh)
    return shards


def _shard_count(index: BundleIndex, prefix: Path) -> int:
    if index.header is not None and index.header.num_shards > 0:
        return index.header.num_shards
    counts = [int(m.group("n")) for p in data_files(prefix) if (m := DATA_RE.match(p.name))]
    if counts:
        return max(counts)
    return 1 + max((e.shard_id for e in index.entries), default=0)


def _pieces(index: BundleIndex) -> tuple[list[BundleEntry], list[Finding]]:
    """Entries that hold bytes (plain variables and slices), plus slice-coverage findings."""
    findings: list[Finding] = []
    slices: dict[str, list[BundleEntry]] = defaultdict(list)
    for e in index.entries:
        if e.is_slice:
            slices[piece_name(e)].append(e)
    pieces = [e for e in index.entries if not e.is_sliced_parent]
    for parent in (e for e in index.entries if e.is_sliced_parent):
        have = {s.slice.text() for s in slices.get(parent.key, []) if s.slice is not None}
        missing = [s.text() for s in parent.slices if s.text() not in have]
        if missing:
            findings.append(Finding(
                "TB013", Severity.ERROR,
                f"{parent.key}: {len(missing)} of {len(parent.slices)} slices have no entry",
                evidence=str(index_path(index.prefix)), source="tensorbundle",
                tensors=(parent.key,), details={"missing_slices": missing}))
    return pieces, findings


def probe_bundle(prefix: Path, options: ProbeOptions, *, fmt: str = FORMAT,
                 path: str | None = None) -> CheckpointReport:
    """Verify the bundle at ``prefix`` (``PREFIX.index`` + shards)."""
    report = CheckpointReport(path=path or str(prefix), format=fmt, verdict=Verdict.INTACT)
    report.extra["prefix"] = str(prefix)
    report.findings.extend(leftover_findings(prefix))
    report.findings.extend(findings_for_prefix(prefix))
    idx = index_path(prefix)
    datas = data_files(prefix)
    if not idx.exists():
        report.files = [str(p) for p in datas]
        if datas:
            report.findings.append(Finding(
                "TB001", Severity.CRITICAL,
                f"{idx.name} is missing but {len(datas)} data shard(s) exist: the save was "
                "interrupted (data is renamed into place before the index)",
                evidence=str(idx), source="tensorbundle"))
            report.verdict = Verdict.INCOMPLETE
        else:
            report.findings.append(Finding("TB001", Severity.CRITICAL,
                                           f"neither {idx.name} nor any data shard exists",
                                           evidence=str(idx), source="tensorbundle"))
            report.verdict = Verdict.INCOMPLETE
        return report
    index = read_index(prefix)
    report.findings.extend(index.findings)
    n = _shard_count(index, prefix)
    report.extra.update({"num_shards": n, "index_entries": len(index.entries)})
    if index.header is not None:
        report.extra["header"] = {"num_shards": index.header.num_shards,
                                  "endianness": index.header.endianness,
                                  "version": index.header.version_producer}
    pieces, slice_findings = _pieces(index)
    report.findings.extend(slice_findings)
    shards = _open_shards(prefix, n)
    try:
        _verify_all(report, index, pieces, shards, options, n)
    finally:
        for s in shards.values():
            if s.fh is not None:
                s.fh.close()
    expected = {shard_path(prefix, i, n) for i in range(n)}
    report.files = [str(idx)] + [str(s.path) for s in shards.values() if s.size is not None]
    for p in datas:
        if p not in expected:
            report.findings.append(Finding("TB007", Severity.WARNING,
                                           f"{p.name} is not one of the {n} shards the index names",
                                           evidence=str(p), source="tensorbundle"))
    for name in {t for f in slice_findings for t in f.tensors}:
        if name not in report.missing_tensors:
            report.missing_tensors.append(name)
    if options.reference is not None:
        report.findings.extend(reference_findings(report, options.reference))
    report.extra["variables"] = len({piece_name(e) for e in index.entries})
    report.verdict = verdict_from(report, index_truncated=index.index_truncated)
    return report


def _verify_all(report: CheckpointReport, index: BundleIndex, pieces: list[BundleEntry],
                shards: dict[int, _Shard], options: ProbeOptions, n: int) -> None:
    ends: dict[int, int] = defaultdict(int)
    for e in pieces:
        ends[e.shard_id] = max(ends[e.shard_id], e.offset + e.size)
    missing_shards = set()
    for i, s in shards.items():
        if s.size is None:
            missing_shards.add(i)
            names = sorted({piece_name(e) for e in pieces if e.shard_id == i})
            report.findings.append(Finding(
                "TB003", Severity.CRITICAL, f"data shard {s.path.name} is missing "
                f"({len(names)} variable(s) lose their bytes)", evidence=str(s.path),
                source="tensorbundle", tensors=tuple(names)))
        elif s.size < ends.get(i, 0):
            names = sorted({piece_name(e) for e in pieces
                            if e.shard_id == i and e.offset + e.size > s.size})
            report.findings.append(Finding(
                "TB004", Severity.ERROR, f"data shard {s.path.name} is {s.size} bytes but its "
                f"entries need {ends[i]}: truncated ({len(names)} variable(s) cut)",
                evidence=str(s.path), offset=s.size, length=ends[i] - s.size,
                source="tensorbundle", tensors=tuple(names)))
        elif s.size > ends.get(i, 0) and ends.get(i, 0) and not index.index_damaged:
            report.findings.append(Finding(
                "TB007", Severity.INFO, f"{s.size - ends[i]} bytes after the last entry of "
                f"{s.path.name}", evidence=str(s.path), offset=ends[i],
                length=s.size - ends[i], source="tensorbundle"))
    bad_shard_id = [e for e in pieces if e.shard_id not in shards]
    if bad_shard_id:
        report.findings.append(Finding(
            "TB014", Severity.ERROR, f"{len(bad_shard_id)} entries name a shard beyond the "
            f"{n} the header declares", evidence=str(index_path(index.prefix)),
            source="tensorbundle", tensors=tuple(sorted({piece_name(e) for e in bad_shard_id}))))
    untrusted_ok: list[str] = []
    for e in sorted(pieces, key=lambda e: (e.shard_id, e.offset)):
        name = piece_name(e)
        shard = shards.get(e.shard_id)
        scan = numeric_scan(e.dtype_name, e.offset, e.size) if options.numeric else None
        result = verify_piece(shard.fh if shard else None, shard.size if shard else None,
                              e, scan.feed if scan is not None else None)
        rec = TensorRecord(
            name=name, dtype=e.dtype_name, shape=e.shape,
            file=str(shard.path) if shard else None, offset=e.offset, length=e.size,
            storage=piece_storage(e, n), status=result.status,
            checksum=f"crc32c:{result.calculated:08x}" if result.status == "ok" else None,
            reasons=[result.reason] if result.reason else [])
        if not e.trusted:
            rec.reasons.append("entry read from a damaged .index block")
        report.tensors.append(rec)
        ev = str(shard.path) if shard else None
        if result.status == "damaged":
            if not e.trusted:
                rec.reasons.append("the entry itself may be what is damaged")
            report.findings.append(Finding(
                "TB002" if "CRC32C" in result.reason else "TB011", Severity.ERROR,
                f"{name}: {result.reason}", evidence=ev, offset=e.offset, length=e.size,
                source="tensorbundle", tensors=(name,),
                details={"storage": rec.storage, "entry_trusted": e.trusted}))
            _add(report.damaged_tensors, name)
        elif result.status in ("missing", "truncated"):
            _add(report.missing_tensors, name)
        elif result.status == "unverified":
            report.findings.append(Finding("TB010", Severity.WARNING, f"{name}: {result.reason}",
                                           evidence=ev, offset=e.offset, length=e.size,
                                           source="tensorbundle", tensors=(name,)))
        elif result.status == "ok":
            if not e.trusted:
                untrusted_ok.append(name)
            if scan is not None:
                found = numeric_findings(scan, name, evidence=ev)
                if found:
                    report.findings.extend(found)
                    rec.status = "suspect"
                    _add(report.suspect_tensors, name)
    if untrusted_ok:
        names = tuple(dict.fromkeys(untrusted_ok))
        report.findings.append(Finding(
            "TB009", Severity.WARNING, f"{len(names)} variable(s) read from damaged .index "
            "blocks; their data matches the recovered entries' CRC32C (names as recovered)",
            evidence=str(index_path(index.prefix)), source="tensorbundle", tensors=names))


def _add(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)


@dataclass
class VerifiedTensor:
    """A tensor whose bytes verified, for salvage: ``data`` is the full little-endian buffer."""

    name: str
    dtype: str  # safetensors dtype (F32, I64, ...)
    shape: tuple[int, ...]
    data: bytes


@dataclass
class LostTensor:
    name: str
    reason: str


def iter_bundle_tensors(prefix: Path) -> Iterator[VerifiedTensor | LostTensor]:
    """Every variable of the bundle: verified bytes (slices reassembled) or why it is lost.

    Each piece is re-read and re-verified (CRC32C over exactly the bytes returned), one variable
    in memory at a time.
    """
    import google_crc32c
    import numpy as np

    from ckptrescue.formats.sstable import unmask

    if not index_path(prefix).exists():
        return
    index = read_index(prefix)
    n = _shard_count(index, prefix)
    shards = _open_shards(prefix, n)
    try:
        by_name: dict[str, list[BundleEntry]] = defaultdict(list)
        parents = {e.key: e for e in index.entries if e.is_sliced_parent}
        for e in index.entries:
            if not e.is_sliced_parent:
                by_name[piece_name(e)].append(e)
        for name in sorted(set(by_name) | set(parents)):
            pieces = by_name.get(name, [])
            head = parents.get(name) or (pieces[0] if pieces else None)
            if head is None or head.shape is None:
                yield LostTensor(name, "no shape recorded")
                continue
            st = DTYPES.get(head.dtype, (None, None, None, None))[3]
            if st is None:
                yield LostTensor(name, f"dtype {head.dtype_name} has no safetensors equivalent")
                continue
            if name in parents and {s.slice.text() for s in pieces if s.slice} != {
                    s.text() for s in parents[name].slices}:
                yield LostTensor(name, "slices missing")
                continue
            blobs = []
            reason = None
            for p in pieces:
                sh = shards.get(p.shard_id)
                if sh is None or sh.fh is None or sh.size is None:
                    reason = "data shard missing"
                    break
                if p.crc32c is None or p.offset + p.size > sh.size:
                    reason = "bytes missing (truncated shard)" if p.crc32c is not None else \
                        "no CRC32C recorded"
                    break
                sh.fh.seek(p.offset)
                raw = sh.fh.read(p.size)
                if google_crc32c.extend(0, raw) != unmask(p.crc32c) or (
                        p.expected_size is not None and p.expected_size != len(raw)):
                    reason = "CRC32C mismatch"
                    break
                blobs.append((p, raw))
            if reason:
                yield LostTensor(name, reason)
                continue
            if name not in parents:
                yield VerifiedTensor(name, st, head.shape, blobs[0][1])
                continue
            npdt = _np_dtype(head.dtype)
            full = np.zeros(head.shape, dtype=npdt)
            for p, raw in blobs:
                assert p.slice is not None and p.shape is not None
                index_t = tuple(slice(s, None if ln is None else s + ln)
                                for s, ln in p.slice.extents)
                full[index_t] = np.frombuffer(raw, dtype=npdt).reshape(p.shape)
            yield VerifiedTensor(name, st, head.shape, full.tobytes())
    finally:
        for s in shards.values():
            if s.fh is not None:
                s.fh.close()


def _np_dtype(code: int) -> Any:
    import numpy as np

    npdt = DTYPES[code][1]
    if npdt is None:  # bfloat16 / float8: bytes move as unsigned ints of the same width
        return np.dtype({2: "<u2", 1: "|u1"}[DTYPES[code][2] or 1])
    return np.dtype(npdt)


class TensorBundleFormat:
    """``PREFIX.index`` (+ shards): detected from the SSTable footer or the file names."""

    name: ClassVar[str] = FORMAT
    priority: ClassVar[int] = 40

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            if path.is_dir():
                return False
            if path.name.endswith(".index"):
                return is_sstable(path) or bool(data_files(prefix_of(path) or path))
            if DATA_RE.match(path.name):
                return True
            return not path.exists() and prefix_of(path) is not None
        except OSError:
            return False

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        prefix = prefix_of(path) or path
        return probe_bundle(prefix, options)

    @classmethod
    def claim(cls, directory: Path) -> list[tuple[Path, list[Path]]]:
        """Group a directory's bundle files into checkpoints: ``[(prefix, files)]``."""
        groups: dict[str, list[Path]] = defaultdict(list)
        for p in sorted(directory.iterdir()):
            if not p.is_file():
                continue
            if p.name.endswith(".index"):
                groups[p.name[: -len(".index")]].append(p)
            elif (m := DATA_RE.match(p.name)):
                groups[m.group("prefix")].append(p)
            elif TEMPSTATE_RE.search(p.name):
                groups[p.name.split(".")[0]].append(p)
        return [(directory / k, v) for k, v in sorted(groups.items())]

    @classmethod
    def iter_verified_tensors(cls, path: Path) -> Iterator[VerifiedTensor | LostTensor]:
        return iter_bundle_tensors(prefix_of(path) or path)


FORMATS = [TensorBundleFormat]
