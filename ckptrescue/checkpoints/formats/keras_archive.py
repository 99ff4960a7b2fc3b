"""Keras v3 ``.keras`` archives: a zip of ``metadata.json``, ``config.json``, ``model.weights.h5``.

Who calls it: the generic checkpoint probe through ``FORMATS``.

Checks: the zip structure (central directory from the end, else a forward walk of local headers
— shared with the torch formats through :mod:`zipwalk`), every member's CRC-32 streamed (Keras
writes ZIP_STORED with real CRCs; ``zipfile`` raises ``Bad CRC-32`` on load), then the weights
member walked as HDF5 through a byte window of the archive (:mod:`h5weights`), so tensor offsets
are absolute offsets into the ``.keras`` file. A CRC mismatch says the weights changed but not
which tensor (HDF5 has no per-dataset checksum): the numeric scan is what can point at one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from ckptrescue.checkpoints.base import (
    CheckpointReport,
    ProbeOptions,
    TensorRecord,
    Verdict,
    worst_verdict,
)
from ckptrescue.checkpoints.formats import keras_zip, zipwalk
from ckptrescue.checkpoints.formats.h5weights import Window, walk_h5
from ckptrescue.checkpoints.formats.tf_findings import verdict_from
from ckptrescue.model import Finding, Severity

FORMAT = "keras"
WEIGHTS_MEMBERS = ("model.weights.h5",)
KERAS_MEMBERS = {"metadata.json", "config.json", "model.weights.h5", "model.weights.npz"}


def _layout(fh: zipwalk.BinaryIO) -> zipwalk.ZipLayout:
    layout = zipwalk.read_central(fh)
    return layout if layout is not None else zipwalk.walk_local(fh)


def _names(path: Path) -> set[str]:
    try:
        with path.open("rb") as fh:
            if fh.read(4) != zipwalk.LOCAL_SIG and zipwalk.read_central(fh) is None:
                return set()
            return {r.name for r in _layout(fh).records}
    except Exception:  # noqa: BLE001 - detection never raises
        return set()


def probe_keras(path: Path, options: ProbeOptions) -> CheckpointReport:
    report = CheckpointReport(path=str(path), format=FORMAT, verdict=Verdict.INTACT,
                              files=[str(path)])
    ev = str(path)
    size = path.stat().st_size
    truncated = False
    with path.open("rb") as fh:
        layout = _layout(fh)
        if not layout.central_directory:
            truncated = True
            report.findings.append(Finding(
                "KR002", Severity.ERROR, "no end-of-central-directory record: the archive is "
                "truncated or its tail overwritten; members found by walking local headers",
                evidence=ev, source="keras"))
        for kind, msg, off in layout.problems:
            report.findings.append(Finding("KR002", Severity.ERROR, f"zip {kind}: {msg}",
                                           evidence=ev, offset=off, source="keras"))
        members = {}
        for rec in layout.records:
            members[rec.name] = rec
            if rec.data_offset is None or rec.compressed_size is None or rec.truncated or (
                    rec.data_end is not None and rec.data_end > size):
                truncated = True
                report.findings.append(Finding(
                    "KR002", Severity.ERROR, f"member {rec.name} runs past the end of the file",
                    evidence=ev, offset=rec.header_offset, source="keras"))
                continue
            if rec.method != 0:
                bad = keras_zip.check_compressed(fh, rec)
                if bad is not None:
                    report.findings.append(Finding(
                        "KR010", Severity.ERROR, f"member {rec.name}: {bad}", evidence=ev,
                        offset=rec.data_offset, length=rec.compressed_size, source="keras",
                        details={"member": rec.name}))
                elif rec.name in WEIGHTS_MEMBERS:
                    report.findings.append(Finding(
                        "KR004", Severity.WARNING, f"{rec.name} is compressed (method "
                        f"{rec.method}): size and CRC-32 verified through a bounded inflate; "
                        "tensors have no file offsets", evidence=ev, source="keras"))
                continue
            crc, got = zipwalk.crc_range(fh, rec.data_offset, rec.compressed_size)
            if rec.crc is not None and got == rec.compressed_size and crc != rec.crc:
                report.findings.append(Finding(
                    "KR001", Severity.ERROR, f"Bad CRC-32 for member {rec.name}: stored "
                    f"{rec.crc:#010x}, calculated {crc:#010x}", evidence=ev,
                    offset=rec.data_offset, length=rec.compressed_size, source="keras",
                    details={"member": rec.name}))
        for problem in keras_zip.zipfile_refusals(fh):
            report.findings.append(Finding("KR011", Severity.ERROR, problem, evidence=ev,
                                           source="keras"))
        report.extra["members"] = sorted(members)
        weights = next((members[n] for n in WEIGHTS_MEMBERS if n in members), None)
        if weights is None:
            if "model.weights.npz" not in members:
                report.findings.append(Finding("KR003", Severity.ERROR,
                                               "no model.weights.h5 member", evidence=ev,
                                               source="keras"))
        elif weights.method != 0:
            crc_bad = any(f.code == "KR010" and f.details.get("member") == weights.name
                          for f in report.findings)
            if not crc_bad and not truncated:
                keras_zip.walk_deflated(fh, weights, report, ev, options.numeric)
        elif weights.data_offset is not None and weights.compressed_size is not None:
            limit = max(0, min(weights.compressed_size, size - weights.data_offset))
            window = Window(fh, weights.data_offset, limit)
            walk = walk_h5(window, evidence=ev, raw=fh, base=weights.data_offset,
                           limit=limit, numeric=options.numeric)
            report.tensors = walk.tensors
            report.findings.extend(walk.findings)
            report.suspect_tensors = walk.suspect
            report.damaged_tensors = walk.unreadable
            crc_bad = any(f.code == "KR001" and f.details.get("member") == weights.name
                          for f in report.findings)
            for t in report.tensors:
                if t.status == "unverified" and not crc_bad and not truncated:
                    t.status, t.reasons = "ok", ["the weights member's CRC-32 verifies"]
    report.verdict = verdict_from(report)
    if any(f.code in ("KR010", "KR011") for f in report.findings):
        report.verdict = worst_verdict([report.verdict, Verdict.DAMAGED])
    if truncated:
        report.verdict = Verdict.TRUNCATED
    return report


class KerasArchiveFormat:
    """``.keras`` zip archives (detected from their members, not the extension)."""

    name: ClassVar[str] = FORMAT
    priority: ClassVar[int] = 35

    @classmethod
    def detect(cls, path: Path) -> bool:
        if not path.is_file():
            return False
        names = _names(path)
        return bool(names & {"model.weights.h5", "model.weights.npz"}) or (
            {"metadata.json", "config.json"} <= names)

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        return probe_keras(path, options)

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        """Tensors are verified only when the weights member's CRC-32 verifies."""
        for rec in report.tensors:
            if rec.status in ("ok", "suspect") and rec.offset is not None:
                yield rec, None
            elif rec.status == "unverified":
                yield rec, "the weights member fails its CRC-32 (or is cut): which tensor " \
                    "changed cannot be told"
            else:
                yield rec, "; ".join(rec.reasons) or rec.status


FORMATS = [KerasArchiveFormat]
