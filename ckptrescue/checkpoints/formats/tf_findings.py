"""Shared by the TensorFlow / Keras formats: the numeric scan adapter and finding -> verdict.

Pure. The numeric scan itself is the one the PyTorch formats use (``formats/numeric.py``, codes
NM001-NM007), wrapped so that a failure in it can never stop the CRC pass; TF/Keras names add
two invariants (BatchNorm ``moving_variance`` > 0, Adam ``velocity`` >= 0). The ``--reference``
comparison is the generic one (``probes/reference.py``), by variable name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ckptrescue.checkpoints.base import CheckpointReport, Verdict, worst_verdict
from ckptrescue.model import Finding, JsonObject, Severity

if TYPE_CHECKING:
    from ckptrescue.checkpoints.formats.numeric import StorageScan
    from ckptrescue.checkpoints.formats.numeric_small import SmallScan

VERDICT_OF_CODE: dict[str, Verdict] = {
    "SS002": Verdict.DAMAGED, "SS003": Verdict.DAMAGED, "SS005": Verdict.DAMAGED,
    "SS006": Verdict.DAMAGED, "TB002": Verdict.DAMAGED, "TB005": Verdict.DAMAGED,
    "TB006": Verdict.DAMAGED, "TB011": Verdict.DAMAGED, "TB015": Verdict.DAMAGED,
    "TB001": Verdict.INCOMPLETE, "TB003": Verdict.INCOMPLETE, "TB013": Verdict.INCOMPLETE,
    "TB014": Verdict.INCOMPLETE, "TC001": Verdict.INCOMPLETE, "SD004": Verdict.INCOMPLETE,
    "SD001": Verdict.INCOMPLETE, "KR003": Verdict.INCOMPLETE, "KR005": Verdict.INCOMPLETE,
    "KR006": Verdict.INCOMPLETE,
    "TB004": Verdict.TRUNCATED, "H5005": Verdict.TRUNCATED, "H5006": Verdict.TRUNCATED,
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


class GuardedScan:
    """A numeric scan that can never break verification: a failure disables it and is kept."""

    def __init__(self, scan: StorageScan | SmallScan) -> None:
        self.scan: StorageScan | SmallScan | None = scan
        self.error: str | None = None

    def feed(self, offset: int, chunk: bytes) -> None:
        if self.scan is None:
            return
        try:
            self.scan.feed(offset, chunk)
        except Exception as exc:  # noqa: BLE001 - the CRC pass must go on whatever happens
            self.scan, self.error = None, f"{type(exc).__name__}: {exc}"

    def wire(self) -> JsonObject:
        """The state of the scan (see ``StorageScan.wire``); a scan that cannot be carried
        raises AttributeError (the forked reader's parent then reads that part again)."""
        return {"error": self.error,
                "scan": None if self.scan is None else self.scan.wire()}  # type: ignore[union-attr]

    def unwire(self, state: JsonObject) -> None:
        if state["scan"] is None:
            self.scan, self.error = None, str(state["error"])
        elif self.scan is not None:
            self.scan.unwire(state["scan"])  # type: ignore[union-attr]

    def merge(self, later: GuardedScan) -> None:
        """Append the scan of the next part of the same tensor (read on another thread)."""
        if self.scan is None:
            return
        if later.scan is None:
            self.scan, self.error = None, later.error
            return
        try:
            self.scan.merge(later.scan)  # type: ignore[union-attr, arg-type]
        except Exception as exc:  # noqa: BLE001
            self.scan, self.error = None, f"{type(exc).__name__}: {exc}"


def numeric_scan(dtype: str, offset: int, size: int, *, big_endian: bool = False,
                 name: str | None = None) -> GuardedScan | None:
    """A streaming numeric scan for one tensor (None for dtypes without numeric checks); with
    the tensor's ``name``, a tensor of 16 elements or more has its signs counted only where
    the name carries an invariant (a smaller one's few values are all kept)."""
    from ckptrescue.checkpoints.formats.numeric import StorageScan
    from ckptrescue.checkpoints.formats.numeric_small import SmallScan, small_enough

    if small_enough(dtype, size):  # the judge needs 16 elements for more than NaN/sign checks
        return GuardedScan(SmallScan(dtype, start=offset, length=size, big_endian=big_endian))
    scan = StorageScan(dtype, start=offset, length=size, big_endian=big_endian,
                       names=None if name is None else [name])
    return None if scan.summary.skipped else GuardedScan(scan)


def numeric_scan_parts(dtype: str, offset: int, size: int, *, big_endian: bool = False,
                       name: str | None = None) -> Callable[[int, int], GuardedScan] | None:
    """A maker of scans for the parts of one tensor (``make_scan`` of a
    :class:`streaming.ByteRange`), or None for dtypes without numeric checks. A tensor too
    small to be cut gets the small scan; the parts of a larger one get joinable scans."""
    from ckptrescue.checkpoints.formats.numeric import StorageScan
    from ckptrescue.checkpoints.formats.numeric_small import small_enough

    if small_enough(dtype, size) or StorageScan(dtype, start=offset, length=size).summary.skipped:
        whole = numeric_scan(dtype, offset, size, big_endian=big_endian, name=name)
        return None if whole is None else (lambda _start, _length: whole)
    names = None if name is None else [name]

    def part(start: int, length: int) -> GuardedScan:
        return GuardedScan(StorageScan(dtype, start=start, length=length,
                                       big_endian=big_endian, names=names))
    return part


def numeric_findings(guarded: GuardedScan, name: str, *,
                     evidence: str | None) -> list[Finding]:
    """NM findings for one finished scan (shared judge), plus TF/Keras name invariants."""
    from ckptrescue.checkpoints.formats.numeric import (
        TF_SECOND_MOMENT_PARTS,
        TF_VARIANCE_PARTS,
        judge,
    )

    scan = guarded.scan
    try:
        if scan is None:
            raise RuntimeError(guarded.error or "numeric scan unavailable")
        summary = scan.finish()
        judged = judge(summary, [name])
    except Exception as exc:  # noqa: BLE001
        return [Finding("NM007", Severity.INFO, f"{name}: numeric scan failed: {exc}",
                        evidence=evidence, source="numeric", tensors=(name,))]
    out = [Finding(s.code, Severity.WARNING, s.title, evidence=evidence, offset=s.offset,
                   length=s.length, source="numeric", tensors=(name,), details=s.details)
           for s in judged]
    lname = name.lower()
    if any(part in lname for part in TF_VARIANCE_PARTS) and summary.nonpositive \
            and not any(f.code == "NM005" for f in out):
        out.append(Finding("NM005", Severity.WARNING,
                           f"{summary.nonpositive} values <= 0 in BatchNorm moving variance "
                           f"{name}", evidence=evidence, offset=scan.start,
                           length=scan.end - scan.start, source="numeric", tensors=(name,),
                           details={"nonpositive": summary.nonpositive}))
    if any(part in lname for part in TF_SECOND_MOMENT_PARTS) and summary.negatives \
            and not any(f.code == "NM004" for f in out):
        out.append(Finding("NM004", Severity.WARNING,
                           f"{summary.negatives} negative values in Adam second moment {name}",
                           evidence=evidence, offset=scan.start, length=scan.end - scan.start,
                           source="numeric", tensors=(name,),
                           details={"negatives": summary.negatives}))
    return out
