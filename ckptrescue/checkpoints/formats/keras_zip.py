"""The zip side of ``.keras`` archives as Keras reads them (Python's ``zipfile``).

* :func:`zipfile_refusals`: what ``zipfile`` raises opening the archive and each member's local
  header (encryption, unsupported method or version, a local name that differs from the
  central one, a bad signature, multi-disk) — Keras cannot load such a file. Only headers are
  read here; the bytes are verified by streaming (below), never by ``zipfile`` decompressing.
* :func:`check_compressed`: a deflated member inflated in bounded chunks (absolute and ratio
  limits, the recorded size) with its CRC-32 compared, so a "1 GiB of zeros with a fake CRC"
  member is damaged, not silently passed.
* :func:`walk_deflated`: the inflated weights member (up to :data:`H5_LIMIT`) spooled to a
  temporary file and walked by the HDF5 weight checks; its tensors get no file offsets.
"""

from __future__ import annotations

import tempfile
import zipfile
from typing import TYPE_CHECKING, BinaryIO

from ckptrescue.checkpoints.formats import zipinflate, zipwalk

if TYPE_CHECKING:
    from ckptrescue.checkpoints.base import CheckpointReport

H5_LIMIT = 4 * 1024 ** 3  # inflate a deflated model.weights.h5 for the HDF5 walk up to 4 GiB
MAX_OUT = 64 * 1024 ** 3


def zipfile_refusals(fh: BinaryIO) -> list[str]:
    """Problems ``zipfile`` reports opening the archive or any member (headers only)."""
    out: list[str] = []
    fh.seek(0)
    try:
        zf = zipfile.ZipFile(fh)
    except Exception as exc:  # noqa: BLE001 - BadZipFile, NotImplementedError, OverflowError...
        return [f"Python's zipfile refuses the archive: {type(exc).__name__}: {exc}"[:300]]
    with zf:
        for info in zf.infolist()[:10000]:
            try:
                with zf.open(info):
                    pass
            except Exception as exc:  # noqa: BLE001
                out.append(f"Python's zipfile refuses member {info.filename!r:.80}: "
                           f"{type(exc).__name__}: {exc}"[:300])
    return out


def check_compressed(fh: BinaryIO, rec: zipwalk.ZipRecord) -> str | None:
    """Why a compressed member does not read back as recorded (None: it does)."""
    if rec.method != 8:
        return f"compression method {rec.method} is not checked (Keras writes stored or " \
            "deflated members)" if rec.method not in (12, 14) else None
    if rec.data_offset is None or rec.compressed_size is None:
        return "no data offset"
    res = zipinflate.inflate_member(fh, rec.data_offset, rec.compressed_size, rec.size,
                                    max_out=MAX_OUT)
    return zipinflate.judge(res, rec.size, rec.crc)


def walk_deflated(fh: BinaryIO, rec: zipwalk.ZipRecord, report: CheckpointReport, ev: str,
                  numeric: bool) -> None:
    """HDF5 weight checks on the inflated member (its CRC-32 already verified)."""
    from ckptrescue.checkpoints.formats.h5weights import Window, walk_h5
    from ckptrescue.model import Finding, Severity

    size = rec.size or 0
    if rec.data_offset is None or rec.compressed_size is None or size > H5_LIMIT:
        report.findings.append(Finding(
            "KR004", Severity.WARNING, f"{rec.name}: {size} bytes deflated, above the "
            f"{H5_LIMIT} byte limit for walking it: tensors not listed", evidence=ev,
            source="keras"))
        return
    with tempfile.TemporaryFile(prefix="ckr-keras-") as tmp:
        zipinflate.inflate_member(fh, rec.data_offset, rec.compressed_size, size,
                                  max_out=H5_LIMIT, on_chunk=lambda _o, c: tmp.write(c))
        tmp.flush()
        walk = walk_h5(Window(tmp, 0, size), evidence=ev, raw=tmp, base=0, limit=size,
                       numeric=numeric)
    for t in walk.tensors:
        t.offset = None
        if t.status == "unverified":
            t.status, t.reasons = "ok", ["the weights member's CRC-32 verifies (after inflate)"]
    report.tensors = walk.tensors
    report.findings.extend(walk.findings)
    report.suspect_tensors = walk.suspect
    report.damaged_tensors = walk.unreadable
