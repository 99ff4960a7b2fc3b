"""TensorFlow SavedModel directories: ``saved_model.pb``, ``variables/``, ``fingerprint.pb``.

Who calls it: the generic checkpoint probe through ``FORMATS``; salvage through
:meth:`SavedModelFormat.iter_verified_tensors` (the ``variables/variables`` bundle).

Checks, TF-free: ``saved_model.pb`` is present and its top-level protobuf fields decode; the
``variables/variables`` TensorBundle is verified like any checkpoint (every tensor's CRC32C);
``fingerprint.pb``'s ``checkpoint_hash`` (field 5) equals FarmHash ``Fingerprint64`` of the
``variables.index`` bytes (``tensorflow/cc/saved_model/fingerprinting.cc``). The
``saved_model_checksum`` field is not a hash of the file bytes and is not used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.formats.protowire import WireError, iter_fields, scan_fields
from ckptrescue.checkpoints.formats.tensorbundle import probe_bundle
from ckptrescue.checkpoints.formats.tensorbundle_index import data_files, index_path
from ckptrescue.checkpoints.formats.tf_findings import verdict_from
from ckptrescue.model import Finding, Severity

FORMAT = "tf-savedmodel"
HASH_CAP = 256 * 1024 * 1024  # FarmHash needs the whole buffer; indexes are small


def _variables_prefix(root: Path) -> Path:
    return root / "variables" / "variables"


def fingerprint_checkpoint_hash(path: Path) -> int | None:
    """``FingerprintDef.checkpoint_hash`` (field 5) of a ``fingerprint.pb``."""
    with path.open("rb") as fh:
        data = fh.read(1024 * 1024)
    for num, wire, value in iter_fields(data):
        if num == 5 and wire == 0 and isinstance(value, int):
            return value
    return None


def _saved_model_findings(root: Path) -> list[Finding]:
    pb = root / "saved_model.pb"
    if not pb.exists():
        if (root / "saved_model.pbtxt").exists():
            return []
        return [Finding("SD001", Severity.ERROR, "saved_model.pb is missing", evidence=str(pb),
                        source="savedmodel")]
    size = pb.stat().st_size
    try:
        with pb.open("rb") as fh:
            fields = {num for num, _w, _off, _len in scan_fields(fh, size)}
    except WireError as exc:
        return [Finding("SD005", Severity.ERROR, f"saved_model.pb does not decode as a protobuf: "
                        f"{exc}", evidence=str(pb), source="savedmodel")]
    if 2 not in fields:
        return [Finding("SD005", Severity.ERROR, "saved_model.pb holds no MetaGraphDef",
                        evidence=str(pb), source="savedmodel")]
    return []


def _fingerprint_findings(root: Path) -> tuple[list[Finding], dict[str, object]]:
    fp = root / "fingerprint.pb"
    idx = index_path(_variables_prefix(root))
    if not fp.exists():
        return [Finding("SD003", Severity.WARNING, "fingerprint.pb is missing (TF < 2.12 does "
                        "not write one): the index hash cannot be checked", evidence=str(fp),
                        source="savedmodel")], {}
    try:
        stored = fingerprint_checkpoint_hash(fp)
    except (OSError, WireError) as exc:
        return [Finding("SD003", Severity.WARNING, f"fingerprint.pb undecodable: {exc}",
                        evidence=str(fp), source="savedmodel")], {}
    if stored is None or not idx.exists() or idx.stat().st_size > HASH_CAP:
        return [], {"checkpoint_hash": stored}
    import farmhash

    with idx.open("rb") as fh:
        actual = int(farmhash.fingerprint64(fh.read()))
    extra = {"checkpoint_hash": stored, "index_fingerprint64": actual}
    if actual != stored:
        return [Finding("SD002", Severity.ERROR,
                        f"fingerprint.pb checkpoint_hash {stored} but Fingerprint64 of "
                        f"variables.index is {actual}: the index changed after the save",
                        evidence=str(idx), source="savedmodel", details=extra)], extra
    return [], extra


def probe_savedmodel(root: Path, options: ProbeOptions) -> CheckpointReport:
    prefix = _variables_prefix(root)
    if index_path(prefix).exists() or data_files(prefix):
        report = probe_bundle(prefix, options, fmt=FORMAT, path=str(root))
    else:
        report = CheckpointReport(path=str(root), format=FORMAT, verdict=Verdict.INTACT)
        if not (root / "variables").is_dir():
            report.findings.append(Finding("SD004", Severity.ERROR, "variables/ is missing",
                                           evidence=str(root / "variables"),
                                           source="savedmodel"))
        else:
            report.extra["variables"] = 0  # a SavedModel without variables writes none
    report.findings[:0] = _saved_model_findings(root)
    fp_findings, fp_extra = _fingerprint_findings(root)
    report.findings.extend(fp_findings)
    report.extra.update(fp_extra)
    for name in ("saved_model.pb", "fingerprint.pb"):
        if (root / name).exists():
            report.files.insert(0, str(root / name))
    report.verdict = verdict_from(report, index_truncated=any(
        f.code == "SS001" for f in report.findings))
    return report


class SavedModelFormat:
    """A SavedModel directory (detected from ``saved_model.pb`` or ``variables/`` + fingerprint)."""

    name: ClassVar[str] = FORMAT
    priority: ClassVar[int] = 30

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            if not path.is_dir():
                return False
            return (path / "saved_model.pb").exists() or (path / "saved_model.pbtxt").exists() \
                or ((path / "variables").is_dir() and (path / "fingerprint.pb").exists())
        except OSError:
            return False

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        return probe_savedmodel(path, options)

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        """A SavedModel directory is one checkpoint root (with everything under it)."""
        return [directory] if cls.detect(directory) else []

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        from ckptrescue.checkpoints.formats.tensorbundle_salvage import bundle_salvageable

        return bundle_salvageable(_variables_prefix(path), report)

    @classmethod
    def read_tensor_bytes(cls, path: Path, report: CheckpointReport,
                          rec: TensorRecord) -> Iterator[bytes]:
        from ckptrescue.checkpoints.formats.tensorbundle_salvage import read_bundle_tensor

        return read_bundle_tensor(_variables_prefix(path), rec)

    load_batch: ClassVar[str] = "ckptrescue.sandbox_children.tf_load:load_reports"


FORMATS = [SavedModelFormat]
