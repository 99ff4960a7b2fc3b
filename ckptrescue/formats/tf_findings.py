"""Findings shared by the TensorFlow / Keras formats: numerics, reference diff, verdicts.

Pure apart from re-reading one tensor's bytes (only when a probable bit flip must be located, or
to XOR a variable against the reference when their checksums differ).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue.checkpoint import CheckpointReport, TensorRecord, Verdict, worst_verdict
from ckptrescue.model import Finding, Severity

if TYPE_CHECKING:
    from ckptrescue.formats.numeric import StorageScan

XOR_CHUNK = 4 * 1024 * 1024

VERDICT_OF_CODE: dict[str, Verdict] = {
    "SS002": Verdict.DAMAGED, "SS003": Verdict.DAMAGED, "SS005": Verdict.DAMAGED,
    "SS006": Verdict.DAMAGED, "TB002": Verdict.DAMAGED, "TB005": Verdict.DAMAGED,
    "TB006": Verdict.DAMAGED, "TB011": Verdict.DAMAGED,
    "TB001": Verdict.INCOMPLETE, "TB003": Verdict.INCOMPLETE, "TB013": Verdict.INCOMPLETE,
    "TB014": Verdict.INCOMPLETE, "TC001": Verdict.INCOMPLETE, "SD004": Verdict.INCOMPLETE,
    "SD001": Verdict.INCOMPLETE, "KR003": Verdict.INCOMPLETE,
    "TB004": Verdict.TRUNCATED, "H5005": Verdict.TRUNCATED,
    "SD002": Verdict.DAMAGED, "SD005": Verdict.DAMAGED, "KR001": Verdict.DAMAGED, "KR002": Verdict.DAMAGED,
    "H5002": Verdict.DAMAGED, "H5003": Verdict.DAMAGED,
    "NM001": Verdict.SUSPECT, "NM002": Verdict.SUSPECT, "NM003": Verdict.SUSPECT,
    "NM004": Verdict.SUSPECT, "NM005": Verdict.SUSPECT, "NM006": Verdict.SUSPECT,
    "RF004": Verdict.SUSPECT,
}


def verdict_from(report: CheckpointReport, *, index_truncated: bool = False) -> Verdict:
    """The worst verdict the findings imply (a truncated ``.index`` makes it ``truncated``)."""
    verdicts = [VERDICT_OF_CODE[f.code] for f in report.findings if f.code in VERDICT_OF_CODE]
    if index_truncated:
        verdicts.append(Verdict.TRUNCATED)
    return worst_verdict(verdicts)


def numeric_scan(dtype: str, offset: int, size: int) -> StorageScan | None:
    """A streaming numeric scan for one tensor (None for dtypes without numeric checks)."""
    from ckptrescue.formats.numeric import StorageScan

    scan = StorageScan(dtype, start=offset, length=size)
    return None if scan.summary.skipped else scan


def numeric_findings(scan: StorageScan, name: str, *, evidence: str | None) -> list[Finding]:
    """NM findings for one finished scan (shared judge), plus TF/Keras name invariants."""
    from ckptrescue.formats.numeric import judge

    summary = scan.finish()
    out = [Finding(s.code, Severity.WARNING, s.title, evidence=evidence, offset=s.offset,
                   length=s.length, source="numeric", tensors=(name,), details=s.details)
           for s in judge(summary, [name])]
    lname = name.lower()
    if ("moving_variance" in lname or "running_var" in lname) and summary.nonpositive \
            and not any(f.code == "NM005" for f in out):
        out.append(Finding("NM005", Severity.WARNING,
                           f"{summary.nonpositive} values <= 0 in BatchNorm moving variance "
                           f"{name}", evidence=evidence, offset=scan.start,
                           length=scan.end - scan.start, source="numeric", tensors=(name,),
                           details={"nonpositive": summary.nonpositive}))
    if "velocity" in lname and summary.negatives and not any(f.code == "NM004" for f in out):
        out.append(Finding("NM004", Severity.WARNING,
                           f"{summary.negatives} negative values in Adam second moment {name}",
                           evidence=evidence, offset=scan.start, length=scan.end - scan.start,
                           source="numeric", tensors=(name,),
                           details={"negatives": summary.negatives}))
    return out


def _by_name(records: list[TensorRecord]) -> dict[str, list[TensorRecord]]:
    out: dict[str, list[TensorRecord]] = defaultdict(list)
    for r in records:
        out[r.name].append(r)
    return out


def _xor_bits(a: TensorRecord, b: TensorRecord) -> tuple[int, int | None]:
    """Differing bits between two records' bytes (stops counting past 1); first bit index."""
    import numpy as np

    assert a.file and b.file and a.length is not None and a.offset is not None
    assert b.offset is not None
    diff = 0
    first: int | None = None
    with Path(a.file).open("rb") as fa, Path(b.file).open("rb") as fb:
        fa.seek(a.offset)
        fb.seek(b.offset)
        done = 0
        while done < a.length:
            n = min(XOR_CHUNK, a.length - done)
            xa, xb = fa.read(n), fb.read(n)
            if len(xa) != n or len(xb) != n:
                return 2, None
            x = np.bitwise_xor(np.frombuffer(xa, np.uint8), np.frombuffer(xb, np.uint8))
            nz = np.flatnonzero(x)
            if nz.size:
                diff += int(np.bitwise_count(x[nz]).sum())
                if first is None:
                    first = (done + int(nz[0])) * 8 + int(x[nz[0]]).bit_length() - 1
                if diff > 1:
                    return diff, first
            done += n
    return diff, first


def reference_findings(report: CheckpointReport, reference: CheckpointReport) -> list[Finding]:
    """Variables missing/added/changed shape or dtype versus ``reference``; single-bit diffs."""
    out: list[Finding] = []
    mine, theirs = _by_name(report.tensors), _by_name(reference.tensors)
    ev = reference.path
    for name in sorted(set(theirs) - set(mine)):
        out.append(Finding("RF001", Severity.WARNING, f"{name}: in the reference, not here",
                           evidence=ev, source="reference", tensors=(name,)))
    for name in sorted(set(mine) - set(theirs)):
        out.append(Finding("RF002", Severity.INFO, f"{name}: not in the reference",
                           evidence=report.path, source="reference", tensors=(name,)))
    for name in sorted(set(mine) & set(theirs)):
        a, b = mine[name], theirs[name]
        if len(a) != 1 or len(b) != 1:
            continue
        ra, rb = a[0], b[0]
        if (ra.shape, ra.dtype) != (rb.shape, rb.dtype):
            out.append(Finding("RF003", Severity.WARNING,
                               f"{name}: {rb.dtype}{list(rb.shape or [])} in the reference, "
                               f"{ra.dtype}{list(ra.shape or [])} here", evidence=report.path,
                               source="reference", tensors=(name,)))
            continue
        if (ra.status != "ok" or rb.status not in ("ok", "suspect") or ra.checksum is None
                or ra.checksum == rb.checksum or ra.length != rb.length or not ra.length
                or not ra.file or not rb.file):
            continue
        try:
            bits, first = _xor_bits(ra, rb)
        except OSError:
            continue
        if bits == 1 and first is not None:
            byte = first // 8
            out.append(Finding(
                "RF004", Severity.ERROR,
                f"{name}: differs from the reference by exactly one bit (byte {byte}, bit "
                f"{first % 8}): a bit flip, not training", evidence=ra.file,
                offset=(ra.offset or 0) + byte, length=1, source="reference", tensors=(name,),
                details={"bit_index": first, "reference": rb.file}))
    return out
