"""Parts of a torch zip probe: the pickle record, each storage record, serialization_id.

Split from :mod:`torch_zip` (which walks the archive and assembles the report): reading
``data.pkl`` (stored or deflated, never executed), verifying one storage record (streamed CRC,
sizes against the pickle, deflated records through a bounded inflate), and the
``.data/serialization_id`` cross-check.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ckptrescue.checkpoints.base import TensorRecord, Verdict
from ckptrescue.checkpoints.formats import (
    pickle_roots,
    pickle_scan,
    streaming,
    tensormap,
    torch_zip_view,
    zipinflate,
    zipwalk,
)
from ckptrescue.checkpoints.formats.crc32 import crc32
from ckptrescue.checkpoints.formats.tensormap import StorageCheck
from ckptrescue.checkpoints.formats.torch_zip_view import finding
from ckptrescue.model import Finding


@dataclass
class ZipProbe:
    """The parts of a probe of one zip (a file, or one DCP item inside a file)."""

    tensors: list[TensorRecord] = field(default_factory=list)
    storages: dict[str, StorageCheck] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    globals: list[str] = field(default_factory=list)
    unsafe_globals: list[str] = field(default_factory=list)
    root: Any = None
    prefix: str = ""
    strides: dict[str, list[int]] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    byteorder: str = "little"


def declared_sizes(scan: pickle_scan.PickleScan) -> dict[str, int]:
    sizes: dict[str, int] = {}
    refs_by_key: dict[str, list[Any]] = {}
    for _, ref in pickle_scan.iter_named(scan.root):
        pref = ref.storage if isinstance(ref, pickle_scan.TensorRef) else ref
        if isinstance(pref, pickle_scan.PersistentRef) and pref.is_storage:
            refs_by_key.setdefault(pref.key, []).append(ref)
    for pref in scan.persistent_refs:
        if pref.is_storage:
            refs_by_key.setdefault(pref.key, []).append(pref)
            n = tensormap.declared_nbytes(pref, tensormap.storage_dtype(refs_by_key[pref.key]))
            if n is not None:
                sizes[pref.key] = n
    return sizes


class Bounded(io.RawIOBase):
    """A read-only view of ``fh`` from its current position up to ``end``."""

    def __init__(self, fh: BinaryIO, end: int) -> None:
        self._fh, self._end = fh, end

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._fh.tell()

    def read(self, n: int = -1) -> bytes:
        left = max(0, self._end - self._fh.tell())
        n = left if n is None or n < 0 else min(n, left)
        return self._fh.read(n)

    def readline(self, limit: int = -1) -> bytes:
        left = max(0, self._end - self._fh.tell())
        limit = left if limit is None or limit < 0 else min(limit, left)
        return self._fh.readline(limit)


def byteorder_of(fh: BinaryIO, rec: zipwalk.ZipRecord | None) -> str:
    """The ``byteorder`` record ("little" when absent, as torch < 2.1 wrote none)."""
    if rec is None or rec.data_offset is None or not rec.compressed_size:
        return "little"
    raw = zipwalk.pread(fh, rec.data_offset, min(rec.compressed_size, 8))
    return "big" if raw.strip() == b"big" else "little"


def storage_alignment(fh: BinaryIO, rec: zipwalk.ZipRecord | None) -> int:
    if rec is None or rec.data_offset is None or not rec.compressed_size:
        return 64
    raw = zipwalk.pread(fh, rec.data_offset, min(rec.compressed_size, 16))
    try:
        value = int(raw.decode("ascii").strip())
    except ValueError:
        return 64
    return value if 0 < value <= 1 << 20 else 64


def read_pickle(fh: BinaryIO, rec: zipwalk.ZipRecord, path: str, alignment: int, start: int,
                 end: int, prescan: pickle_scan.PickleScan | None,
                 ) -> tuple[pickle_scan.PickleScan | None, list[Finding], list[Verdict]]:
    findings: list[Finding] = []
    verdicts: list[Verdict] = []
    if rec.data_offset is None:
        rec.data_offset = zipwalk.guess_data_offset(rec, alignment, start)
        findings.append(finding("TZ007", f"{rec.name}: local header damaged; data offset "
                                "inferred from torch's alignment rule", evidence=path,
                                offset=rec.header_offset))
        verdicts.append(Verdict.DAMAGED)
    size = rec.compressed_size
    if rec.method == 8:
        inflated, why = torch_zip_view.inflate_small(fh, rec)
        if inflated is None:
            findings.append(finding("TZ019", f"{rec.name}: deflated and does not read back: "
                                    f"{why}", evidence=path, offset=rec.data_offset))
            findings.append(finding("TZ009", f"{rec.name} unreadable: tensor names lost",
                                    evidence=path, offset=rec.data_offset))
            return None, findings, [*verdicts, Verdict.DAMAGED]
        findings.append(finding("TZ018", f"{rec.name}: deflated (torch.save stores records); "
                                "inflated and inspected", evidence=path, offset=rec.data_offset))
        data, size, start_at = inflated, len(inflated), 0
    elif rec.method != 0:
        findings.append(finding("TZ009", f"{rec.name}: compressed (method {rec.method}); not "
                                "inspected", evidence=path))
        return None, findings, [*verdicts, Verdict.UNREADABLE]
    else:
        if size is None or size > pickle_scan.MAX_PICKLE_BYTES:
            size = min(end - rec.data_offset, pickle_scan.MAX_PICKLE_BYTES)
        data = zipwalk.pread(fh, rec.data_offset, size)
        start_at = rec.data_offset
    crc_bad = False
    expect = rec.size if rec.method == 8 else rec.compressed_size
    if (rec.crc and expect is not None and len(data) == expect
            and crc32(data) & 0xFFFFFFFF != rec.crc):
        crc_bad = True
        findings.append(finding("TZ002", f"{rec.name}: CRC-32 mismatch (pickle bytes "
                                "changed)", evidence=path, offset=rec.data_offset,
                                length=rec.compressed_size))
        verdicts.append(Verdict.DAMAGED)
    try:
        # done once per pickle: a family's layout read may have scanned these bytes already,
        # and its metadata reader reads the same scan (pickle_roots)
        scan = prescan or pickle_roots.torch_scan(data, start_at)
    except pickle_scan.PickleError as exc:
        truncated = rec.truncated or len(data) < (expect or 0)
        findings.append(finding(
            "PK002", f"{rec.name}: static parse stopped at byte {exc.position}: {exc}",
            evidence=path, offset=exc.position))
        if exc.partial is not None:
            # what the unpickler met before the error, it ran: a payload there is unsafe
            bad = exc.partial.unsafe_globals()
            if bad:
                findings.append(finding(
                    "PK001", f"{rec.name} references globals outside the weights-only allowlist "
                    "before its parse error (the unpickler ran them): " + ", ".join(bad),
                    evidence=path, details={"globals": bad}))
                verdicts.append(Verdict.UNSAFE)
        findings.append(finding("TZ009", f"{rec.name} unreadable: tensor names lost",
                                evidence=path, offset=rec.data_offset, length=size))
        verdicts.append(Verdict.TRUNCATED if truncated else Verdict.DAMAGED)
        return None, findings, verdicts
    if crc_bad:
        findings.append(finding("PK002", f"{rec.name}: parses despite the CRC mismatch; names "
                                "and shapes may be wrong", evidence=path))
    return scan, findings, verdicts


def check_records(fh: BinaryIO, jobs: list[tuple[zipwalk.ZipRecord, StorageCheck, list[str]]],
                  path: str, alignment: int, start: int, end: int, do_numeric: bool,
                  out: ZipProbe) -> None:
    """Verify storage records: every stored record's bytes are read once, on a few threads
    (:func:`streaming.read_ranges`: CRC-32 and numeric scan in the same pass), then judged."""
    todo: list[tuple[zipwalk.ZipRecord, StorageCheck, int, streaming.ByteRange]] = []
    for rec, sc, names in jobs:
        size = _record_start(fh, rec, sc, path, alignment, start, end, out)
        if size is None:
            continue
        want = min(size, max(0, end - (sc.data_offset or 0)))
        todo.append((rec, sc, size, tensormap.byte_range(
            sc, length=want, do_numeric=do_numeric, want_crc=bool(rec.crc), names=names,
            big_endian=out.byteorder == "big")))
    streaming.read_ranges(fh, [rng for *_, rng in todo])
    for rec, sc, size, rng in todo:
        tensormap.take_range(sc, rng)
        _record_end(rec, sc, size)


def _record_start(fh: BinaryIO, rec: zipwalk.ZipRecord, sc: StorageCheck, path: str,
                  alignment: int, start: int, end: int, out: ZipProbe) -> int | None:
    """Checks before reading; the number of bytes to read, or None when not read raw."""
    sc.crc_stored = rec.crc
    sc.record_size = rec.compressed_size
    if rec.data_offset is None:
        rec.data_offset = zipwalk.guess_data_offset(rec, alignment, start)
        sc.mark("damaged", "local header damaged (torch.load cannot read this record)",
                "TZ007")
        out.verdicts.append(Verdict.DAMAGED)
    sc.data_offset = rec.data_offset
    if rec.method == 8 and rec.compressed_size is not None:
        _check_deflated(fh, rec, sc, out, path)
        return None
    if rec.method != 0:
        sc.mark("unverified", f"compressed record (method {rec.method}) not inspected")
        return None
    size = rec.compressed_size
    if size is None:
        size = sc.declared if sc.declared is not None else max(0, end - rec.data_offset)
    if sc.declared is not None and rec.compressed_size is not None and rec.source == "central" \
            and sc.declared not in ({rec.compressed_size} & {rec.size}):
        sc.mark("damaged", f"record holds {rec.compressed_size} bytes (uncompressed {rec.size}),"
                f" pickle declares {sc.declared} (size mismatch)", "TZ004")
    return size


def _record_end(rec: zipwalk.ZipRecord, sc: StorageCheck, size: int) -> None:
    """Judge a record from what reading it found (bytes present, CRC-32)."""
    got = sc.available or 0
    if got < size or rec.truncated:
        sc.mark("truncated", f"only {got} of {size} bytes present (file ends)")
        return
    if rec.crc is None:
        sc.mark("unverified", "no CRC-32 available (descriptor lost)")
    elif rec.crc == 0 and size > 0:
        sc.mark("unverified", "CRC-32 not recorded (0)")
    elif rec.crc and sc.crc_actual != rec.crc:
        sc.mark("damaged", f"CRC-32 mismatch: stored {rec.crc:08x}, computed "
                f"{sc.crc_actual:08x}", "TZ002")


def _check_deflated(fh: BinaryIO, rec: zipwalk.ZipRecord, sc: StorageCheck, out: ZipProbe,
                    path: str) -> None:
    """A deflated storage record: inflate (bounded), compare size and CRC-32; the bytes are not
    at a file offset, so tensors viewing it get none (salvage cannot copy them raw)."""
    assert rec.data_offset is not None and rec.compressed_size is not None
    want = sc.declared if sc.declared is not None else rec.size
    res = zipinflate.inflate_member(fh, rec.data_offset, rec.compressed_size, want)
    why = zipinflate.judge(res, want, rec.crc or None)
    sc.crc_actual, sc.available = res.crc, res.size
    sc.data_offset = None
    if why:
        sc.mark("damaged", f"deflated record: {why}", "TZ019")
        return
    sc.reasons.append("deflated record: size and CRC-32 verified through inflate; not at a file "
                      "offset")
    out.findings.append(finding("TZ018", f"{rec.name}: deflated (torch.save stores records); "
                                "verified through a bounded inflate", evidence=path,
                                offset=rec.data_offset, length=rec.compressed_size))


def _hash_combine(seed: int, value: int) -> int:
    mask = (1 << 64) - 1
    return (seed ^ ((value + 0x9E3779B9 + (seed << 6) + (seed >> 2)) & mask)) & mask


def check_serialization_id(fh: BinaryIO, layout: zipwalk.ZipLayout, prefix: str, path: str,
                            out: ZipProbe) -> None:
    target = None
    combined = 0
    for rec in sorted(layout.records, key=lambda r: r.header_offset):
        if rec.name == prefix + ".data/serialization_id":
            target = rec
            break
        if rec.size == 0:
            continue  # torch leaves empty records out of the combined CRC
        combined = _hash_combine(combined, rec.crc or 0)
    if target is None or target.data_offset is None or target.compressed_size != 40:
        return
    raw = zipwalk.pread(fh, target.data_offset, 40)
    try:
        stored = int(raw[20:40].decode("ascii"))
    except ValueError:
        return
    if stored != combined:
        out.findings.append(finding(
            "TZ008", ".data/serialization_id does not match the records' CRCs (records "
            "dropped, reordered or CRC-tampered)", evidence=path, offset=target.data_offset,
            length=40, details={"stored": stored, "computed": combined}))
