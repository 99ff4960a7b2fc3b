"""Shared glue for pickle-based formats: storages -> tensor records, streaming checks, findings.

torch zip, torch legacy and DCP items all describe tensors as views of storages (a pickle gives
``name -> TensorRef(storage key, offset, size, stride, dtype)``; the container gives where each
storage's bytes are and, for zips, their CRC). This module verifies each storage once, streaming
(CRC + numeric scan in the same read), then derives every tensor's file/offset/length/status:
a bad storage implicates every tensor viewing it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ckptrescue.checkpoints.base import TensorRecord, Verdict
from ckptrescue.checkpoints.formats import dtypes, numeric, streaming, view_bits
from ckptrescue.checkpoints.formats.pickle_scan import PersistentRef, TensorRef
from ckptrescue.codes.checkpoint import CODES
from ckptrescue.model import Finding, JsonObject

if TYPE_CHECKING:
    from ckptrescue.checkpoints.base import CheckpointReport

SOURCE = "ckptrescue.checkpoints.formats"
# A record whose container structure is damaged but whose bytes match their CRC: salvageable.
BYTES_VERIFY = "bytes verify (CRC-32 matches)"


def finding(code: str, title: str, *, evidence: str | None, offset: int | None = None,
            length: int | None = None, tensors: Iterable[str] = (),
            details: JsonObject | None = None) -> Finding:
    """A Finding with the catalogue's severity for ``code``."""
    severity = CODES[code][0]
    return Finding(code=code, severity=severity, title=title, evidence=evidence, offset=offset,
                   length=length, source=SOURCE, tensors=tuple(tensors),
                   details=details or {})


@dataclass
class StorageCheck:
    """Where one storage's bytes are and what verifying them found."""

    key: str
    file: str
    data_offset: int | None = None
    declared: int | None = None  # bytes the pickle declares (numel x itemsize)
    available: int | None = None  # bytes actually present from data_offset
    record_size: int | None = None  # bytes the container says it holds
    crc_stored: int | None = None
    crc_actual: int | None = None
    status: str = "ok"  # ok, unverified, damaged, truncated, missing
    reasons: list[str] = field(default_factory=list)
    summary: numeric.NumericSummary | None = None
    dtype: str | None = None

    codes: list[tuple[str, str]] = field(default_factory=list)  # (finding code, reason)

    def mark(self, status: str, reason: str, code: str | None = None) -> None:
        order = ["ok", "suspect", "unverified", "damaged", "truncated", "missing"]
        if order.index(status) > order.index(self.status):
            self.status = status
        self.reasons.append(reason)
        if code is not None:
            self.codes.append((code, reason))


def storage_map(storages: dict[str, StorageCheck]) -> dict[str, dict[str, Any]]:
    """JSON-safe storage table for ``report.extra["storages"]`` (used by ``storage locate``:
    a bad byte inside a storage implicates every tensor that views it)."""
    return {k: {"file": sc.file, "offset": sc.data_offset, "length": sc.declared,
                "status": sc.status} for k, sc in storages.items()}


def storage_dtype(refs: list[Any]) -> str | None:
    for ref in refs:
        if isinstance(ref, TensorRef) and ref.dtype:
            return ref.dtype
        if isinstance(ref, PersistentRef) and ref.is_storage and ref.storage_dtype:
            return ref.storage_dtype
    return None


def declared_nbytes(pref: PersistentRef, dtype: str | None) -> int | None:
    numel = pref.numel
    if numel is None:
        return None
    if pref.storage_dtype is None:  # UntypedStorage: numel is bytes
        return numel
    info = dtypes.lookup(dtype or pref.storage_dtype)
    return numel * info.itemsize if info else None


def byte_range(sc: StorageCheck, *, length: int, do_numeric: bool, big_endian: bool = False,
               want_crc: bool = True, names: list[str] | None = None) -> streaming.ByteRange:
    """The read of ``length`` bytes at ``sc.data_offset``: CRC-32 and numeric scan together."""
    assert sc.data_offset is not None
    info = dtypes.lookup(sc.dtype)
    make_scan = None
    if do_numeric and sc.dtype:
        dtype = sc.dtype

        def make_scan(start: int, part: int) -> numeric.StorageScan:
            return numeric.StorageScan(dtype, start=start, length=part,
                                       big_endian=big_endian, names=names)
    return streaming.ByteRange(sc.data_offset, length, want_crc=want_crc, make_scan=make_scan,
                               itemsize=info.itemsize if info else 1)


def take_range(sc: StorageCheck, rng: streaming.ByteRange) -> None:
    """Store what reading ``rng`` found on ``sc`` (bytes present, CRC-32, numeric summary)."""
    sc.available = rng.got
    if rng.want_crc:
        sc.crc_actual = rng.crc
    if rng.scan is not None:
        sc.summary = rng.scan.finish()


def stream_check(fh: BinaryIO, sc: StorageCheck, *, length: int, do_numeric: bool,
                 big_endian: bool = False, want_crc: bool = True,
                 names: list[str] | None = None) -> None:
    """Read ``length`` bytes at ``sc.data_offset`` once: CRC-32 and numeric scan together
    (a large range in parallel segments, :mod:`streaming`)."""
    rng = byte_range(sc, length=length, do_numeric=do_numeric, big_endian=big_endian,
                     want_crc=want_crc, names=names)
    streaming.read_ranges(fh, [rng])
    take_range(sc, rng)


def contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def tensor_records(named: list[tuple[str, Any]], storages: dict[str, StorageCheck],
                   strides: dict[str, list[int]] | None = None) -> list[TensorRecord]:
    """One TensorRecord per named TensorRef / bare storage, located in its storage's file.

    Non-contiguous views get their strides (in elements) recorded in ``strides``.
    """
    out: list[TensorRecord] = []
    for name, ref in named:
        pref = ref.storage if isinstance(ref, TensorRef) else ref
        if not isinstance(pref, PersistentRef) or not pref.is_storage:
            continue
        sc = storages.get(pref.key)
        if sc is None:
            continue
        if isinstance(ref, TensorRef):
            dtype = ref.dtype or sc.dtype
            info = dtypes.lookup(dtype)
            isz = info.itemsize if info else 1
            rel, length, shape = ref.offset * isz, ref.extent * isz, ref.size
            if strides is not None and ref.numel > 1 and \
                    tuple(st for sz, st in zip(ref.size, ref.stride, strict=False) if sz > 1) != \
                    tuple(st for sz, st in zip(ref.size, contiguous_strides(ref.size),
                                               strict=False) if sz > 1):
                strides[name] = list(ref.stride)
        else:
            dtype, rel, length, shape = sc.dtype, 0, sc.declared, None
        rec = TensorRecord(name=name, dtype=dtype, shape=shape, file=sc.file,
                           offset=(sc.data_offset + rel) if sc.data_offset is not None else None,
                           length=length, storage=sc.key, status=sc.status,
                           checksum=(f"crc32:{sc.crc_stored:08x}" if sc.crc_stored else None),
                           reasons=list(sc.reasons))
        if sc.status == "damaged" and sc.codes and all(c == "TZ007" for c, _ in sc.codes) \
                and sc.crc_stored and sc.crc_actual == sc.crc_stored:
            rec.reasons.append(BYTES_VERIFY)
        if sc.declared is not None and length is not None and rel + length > sc.declared:
            rec.status = "damaged"
            rec.reasons.append("view extends past its storage")
        if isinstance(ref, TensorRef) and ref.problem:
            rec.status = "damaged"
            rec.reasons.append(f"torch refuses to rebuild it: {ref.problem}")
        if isinstance(ref, TensorRef) and ref.bits:
            rec.reasons.extend(view_bits.markers(ref.bits))
        if sc.status == "truncated" and sc.available is not None and length is not None \
                and rel + length <= sc.available:
            rec.status = "ok"  # the part of a cut storage this view uses is complete
            rec.reasons.append("storage cut short after this view's bytes")
        out.append(rec)
    return out


def numeric_findings(storages: dict[str, StorageCheck], tensors: list[TensorRecord],
                     evidence: str) -> list[Finding]:
    """Judge each storage's numeric summary with the names that view it; marks suspects."""
    by_storage: dict[str, list[TensorRecord]] = {}
    for rec in tensors:
        if rec.storage is not None:
            by_storage.setdefault(rec.storage, []).append(rec)
    out: list[Finding] = []
    skipped: set[str] = set()
    for key, sc in storages.items():
        recs = by_storage.get(key, [])
        if sc.summary is None or not recs:
            continue
        if sc.summary.skipped:
            skipped.add(sc.summary.skipped)
            continue
        names = [r.name for r in recs]
        for sus in numeric.judge(sc.summary, names):
            hit = _tensors_at(recs, sus.offset) if sus.offset is not None else recs
            for rec in hit:
                if rec.status in ("ok", "unverified"):
                    rec.status = "suspect"
                rec.reasons.append(sus.title)
            out.append(finding(sus.code, sus.title, evidence=evidence, offset=sus.offset,
                               length=sus.length, tensors=[r.name for r in hit],
                               details=sus.details))
    if skipped:
        out.append(finding("NM007", "numeric scan skipped: " + "; ".join(sorted(skipped)),
                           evidence=evidence))
    return out


def _tensors_at(recs: list[TensorRecord], offset: int) -> list[TensorRecord]:
    hit = [r for r in recs if r.offset is not None and r.length is not None
           and r.offset <= offset < r.offset + r.length]
    return hit or recs


def finalize(report: CheckpointReport, extra_verdicts: Iterable[Verdict] = ()) -> None:
    """Fill damaged/suspect/missing lists and the verdict from tensor statuses and findings."""
    damaged, suspect, missing = [], [], []
    for rec in report.tensors:
        if rec.status in ("damaged", "truncated"):
            damaged.append(rec.name)
        elif rec.status == "missing":
            missing.append(rec.name)
        elif rec.status == "suspect":
            suspect.append(rec.name)
    report.damaged_tensors, report.suspect_tensors = damaged, suspect
    report.missing_tensors = missing
    verdicts = list(extra_verdicts)
    if damaged:
        verdicts.append(Verdict.DAMAGED)
    if missing:
        verdicts.append(Verdict.INCOMPLETE)
    if suspect or any(f.code.startswith("NM") and f.code != "NM007" for f in report.findings):
        verdicts.append(Verdict.SUSPECT)
    from ckptrescue.checkpoints.base import worst_verdict

    report.verdict = worst_verdict([report.verdict, *verdicts])


def salvageable(report: CheckpointReport) -> Iterator[tuple[TensorRecord, str | None]]:
    """Shared salvage rule for storage-based formats: ok/unverified/suspect bytes are usable
    (and damaged ones whose bytes verify); each tensor with the reason it is not (None: it is)."""
    for rec in report.tensors:
        usable = rec.status in ("ok", "unverified", "suspect") or (
            rec.status == "damaged" and BYTES_VERIFY in rec.reasons)
        if usable and rec.offset is not None and rec.length is not None \
                and rec.shape is not None:
            yield rec, None
        else:
            yield rec, "; ".join(rec.reasons) or rec.status


class StorageSalvage:
    """A format whose tensors are byte ranges of storages it checked (torch zip and legacy, DCP,
    the tar and zip archives of them): it salvages by :func:`salvageable`."""

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        """Every tensor with a reason it cannot be salvaged (None when its bytes verify)."""
        return salvageable(report)
