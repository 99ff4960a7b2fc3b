"""Checkpoints inside tar archives (``tar``): ``.tar``, ``.tar.gz``/``.tgz``, ``.tar.zst``,
walked in place member by member, never extracted.

Decided by content, never by suffix: a file whose first block is a ustar/GNU header with a valid
checksum, or a gzip/zstd stream whose first decompressed block is one (a ``.pth.tar`` that is a
zip is a torch zip; a ``.nemo`` archive is the NeMo family's). The member headers are walked by
``families/tarwalk.py``; each regular member is identified by its own bytes:

* a torch zip (``PK\\x03\\x04``) - in a plain tar, probed over its byte window exactly as a file
  (``torch_zip.probe_zip``: CRC per record, the pickle's safety and torch's own rules, the
  numeric scan; tensors keep their offsets in the archive, so salvage reads them in place); in
  a compressed tar, verified as the stream passes (``zipstream.StreamZip``: CRC per record,
  descriptors and central directory, the pickle) - read once, no temporary copy;
* a pickle (``PROTO`` opcode, or a ``.pkl``/``.pickle`` name) - scanned as a standalone pickle
  (``pickle.load`` resolves every global: off the exact list is ``unsafe``);
* anything else - listed, not judged.

A damaged member header, a cut archive, a zero block hiding later members, a bad gzip CRC-32 or
zstd checksum are findings on the archive (``TA001``-``TA003``). Tensor names are prefixed with
the member's name when the archive holds more than one checkpoint member.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.families import tarwalk
from ckptrescue.checkpoints.formats import pickle_policy, pickle_scan, tensormap
from ckptrescue.checkpoints.formats.pickle_verdict import judge
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.checkpoints.formats.tolerant_read import open_evidence
from ckptrescue.checkpoints.formats.zipstream import StreamZip

_PICKLE_SUFFIXES = (".pkl", ".pickle")
_CHUNK = 1 << 20


def _first_block(path: Path) -> bytes:
    """The archive's first 512 bytes, decompressed when it is a gzip or zstd stream."""
    with open_regular(path) as fh:
        head = fh.read(4)
        fh.seek(0)
        try:
            if head[:2] == tarwalk.GZIP_MAGIC:
                with gzip.GzipFile(fileobj=fh) as gz:
                    return gz.read(tarwalk.BLOCK)
            if head == tarwalk.ZSTD_MAGIC:
                import zstandard

                with zstandard.ZstdDecompressor().stream_reader(fh, closefd=False) as zs:
                    return zs.read(tarwalk.BLOCK)
        except (OSError, EOFError, ImportError, ValueError, Exception):  # noqa: BLE001
            return b""
        return fh.read(tarwalk.BLOCK)


def _kind(head: bytes, name: str) -> str | None:
    if head[:4] == b"PK\x03\x04":
        return "torch-zip"
    if (len(head) >= 2 and head[0] == 0x80 and head[1] <= 5) or name.endswith(_PICKLE_SUFFIXES):
        return "pickle"
    return None


class TarArchiveFormat:
    """A tar archive holding checkpoints (``tar``)."""

    name: ClassVar[str] = "tar"
    priority: ClassVar[int] = 19  # before torch-zip (20): a tar of a zip is not a damaged zip

    @classmethod
    def detect(cls, path: Path) -> bool:
        if not path.is_file() or path.suffix == ".nemo":
            return False
        try:
            return tarwalk.is_tar_header(_first_block(path))
        except OSError:
            return False

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:  # noqa: C901
        spath = str(path)
        report = CheckpointReport(path=spath, format=cls.name, verdict=Verdict.INTACT,
                                  files=[spath])
        verdicts: list[Verdict] = []
        parts: list[dict[str, Any]] = []  # per checkpoint member: name, kind, result

        def allowed(g: str) -> bool:
            return pickle_policy.standalone_allowed(g) or pickle_policy.extra_allowed(
                g, options.extra_allowed)

        def visit(member: tarwalk.TarMember, reader: tarwalk.MemberReader) -> None:
            head = reader.read(8)
            kind = _kind(head, member.name)
            if kind == "torch-zip":
                sz = StreamZip(f"{spath}:{member.name}")
                sz.feed(head)
                while chunk := reader.read(_CHUNK):
                    sz.feed(chunk)
                parts.append({"member": member, "kind": kind, "stream": sz,
                              "cut": reader.left > 0})
            elif kind == "pickle":
                data = head + reader.read(pickle_scan.MAX_PICKLE_BYTES - len(head))
                parts.append({"member": member, "kind": kind, "data": data})

        tw = tarwalk.walk(path, visit)
        for kind, message, offset in tw.problems:
            code = {"truncated": "TA002", "header": "TA001"}.get(kind, "TA003")
            report.findings.append(finding(code, f"{path.name}: {message}", evidence=spath,
                                           offset=None if tw.compressed else offset,
                                           details={"kind": kind}))
            verdicts.append(Verdict.TRUNCATED if kind == "truncated" else Verdict.DAMAGED)
        if not tw.compressed:
            with open_regular(path) as fh:
                for m in tarwalk.iter_files(tw):
                    fh.seek(m.data_offset)
                    head = fh.read(min(8, m.size))
                    kind = _kind(head, m.name)
                    if kind == "pickle":
                        fh.seek(m.data_offset)
                        data = fh.read(min(m.size, pickle_scan.MAX_PICKLE_BYTES))
                        parts.append({"member": m, "kind": kind, "data": data})
                    elif kind == "torch-zip":
                        parts.append({"member": m, "kind": kind})
        multi = len(parts) > 1
        members_json: list[dict[str, Any]] = []
        globals_: set[str] = set()
        unsafe: set[str] = set()
        records: list[dict[str, Any]] = []
        storages: dict[str, Any] = {}
        strides: dict[str, list[int]] = {}
        for part in parts:
            m: tarwalk.TarMember = part["member"]
            prefix = f"{m.name}/" if multi else ""
            own: list[Verdict] = []
            before = len(report.findings)
            if part["kind"] == "pickle":
                scan = pickle_scan.scan_pickle(part["data"], mode="memory", partial=True)
                found, vs = judge(scan, spath, allowed=allowed, weights_only=False,
                                  standalone=True, label=f"{path.name}:{m.name}")
                report.findings.extend(found)
                own.extend(vs)
                globals_.update(scan.globals)
                unsafe.update(g for f in found if f.code == "PK001"
                              for g in f.details.get("globals", []))
            elif "stream" in part:
                tensors, info = part["stream"].finish(cut=part["cut"])
                report.findings.extend(part["stream"].findings)
                own.extend(part["stream"].verdicts)
                for t in tensors:
                    t.name = prefix + t.name
                    t.file = spath
                report.tensors.extend(tensors)
                globals_.update(info["globals"])
                unsafe.update(info["unsafe_globals"])
            else:
                from ckptrescue.checkpoints.formats.torch_zip import probe_zip

                end = min(m.data_offset + m.size, tw.size)
                with open_evidence(path) as fh:
                    z = probe_zip(fh, spath, start=m.data_offset, end=end,
                                  do_numeric=options.numeric, name_prefix=prefix,
                                  extra_allowed=options.extra_allowed)
                for rec in z.tensors:
                    if multi and rec.storage is not None:
                        rec.storage = f"{prefix}{rec.storage}"
                report.tensors.extend(z.tensors)
                report.findings.extend(z.findings)
                own.extend(z.verdicts)
                globals_.update(z.globals)
                unsafe.update(z.unsafe_globals)
                records.extend(z.records)
                strides.update(z.strides)
                for key, st in tensormap.storage_map(z.storages).items():
                    storages[f"{prefix}{key}"] = st
                if end < m.data_offset + m.size:
                    own.append(Verdict.TRUNCATED)
            mine = CheckpointReport(path=spath, format=part["kind"], verdict=Verdict.INTACT,
                                    tensors=[t for t in report.tensors
                                             if not multi or t.name.startswith(prefix)],
                                    findings=report.findings[before:])
            tensormap.finalize(mine, own)
            verdicts.extend(own)
            members_json.append({"name": m.name, "kind": part["kind"], "size": m.size,
                                 "offset": None if tw.compressed else m.data_offset,
                                 "verdict": str(mine.verdict)})
            if mine.verdict is not Verdict.INTACT:
                report.findings.append(finding(
                    "TA004", f"member {m.name} ({part['kind']}) is {mine.verdict}",
                    evidence=spath, offset=None if tw.compressed else m.data_offset,
                    length=m.size, details={"member": m.name, "verdict": str(mine.verdict)}))
        if not parts:
            report.findings.append(finding(
                "TA005", f"{path.name}: no checkpoint member (torch zip or pickle) among "
                f"{len(tw.members)} member(s)", evidence=spath))
            verdicts.append(Verdict.UNREADABLE)
        report.extra.update({
            "globals": sorted(globals_), "unsafe_globals": sorted(unsafe), "strides": strides,
            "records": records, "storages": storages,
            "tar": {"compressed": tw.compressed, "complete": tw.complete,
                    "members": [{"name": m.name, "size": m.size,
                                 "offset": None if tw.compressed else m.data_offset}
                                for m in tarwalk.iter_files(tw)][:4096],
                    "checkpoints": members_json}})
        tensormap.finalize(report, verdicts)
        return report

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        from ckptrescue.checkpoints.formats.torch_zip import tensormap_salvageable

        yield from tensormap_salvageable(report)


FORMATS = [TarArchiveFormat]
