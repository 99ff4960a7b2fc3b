"""Checkpoints inside a plain zip archive (``zip``): ``zip run.zip step-100.pt``, walked in place
member by member, never extracted.

A ``torch.save`` file zipped for transfer is a zip whose members are themselves torch zips (or
legacy streams, or pickles). Read as one torch zip it was ``truncated`` (the outer central
directory names no ``data.pkl``, the inner local headers looked like a cut archive) or, when
deflated, ``unknown``; a payload in the inner ``data.pkl`` was never called ``unsafe``.

Decided by content: an outer central directory that names no torch record itself (so not a
torch zip, nor a ``.keras``), holding at least one member whose first bytes are a torch zip or
a legacy stream (:func:`tar_archive.member_kind`). Each checkpoint member is judged as a member
of a tar is (:class:`tar_archive.Members`):

* stored (method 0) - a torch zip or legacy stream probed over its byte window exactly as a
  file (offsets absolute in the archive, so salvage reads the tensors in place);
* deflated (method 8) - inflated once in bounded chunks (``zipinflate``: size, ratio and
  absolute caps) and verified as the bytes pass (``zipstream.StreamZip`` for a torch zip; the
  pickles of a legacy stream or pickle member), the outer CRC-32 compared too; no offsets;
* any other method - not read: the member is ``unreadable`` (``ZA003``), never ``intact``.

A member not intact is ``ZA001``; two members of one name ``ZA002`` (extraction keeps the
last); a deflated member that does not inflate to its recorded size and CRC-32 ``ZA004``.

The walk reads the archive as the kit does; a responder extracts it with an extractor. So each
checkpoint member is also opened as Python's ``zipfile`` opens it (the same end records, the
same central record, the same local header, its version and flags) and, when stored, read
through it to its CRC-32: a member the extractor would refuse or read elsewhere is ``ZA005``
(damaged), whatever the walk saw - the verdict holds only where both readings agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, Verdict
from ckptrescue.checkpoints.families.tarwalk import TarMember
from ckptrescue.checkpoints.formats import pickle_scan, tensormap, zipcentral, zipinflate, zipwalk
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.checkpoints.formats.tar_archive import HEAD_BYTES, MemberPart, Members, member_kind
from ckptrescue.checkpoints.formats.tensormap import StorageSalvage, finding
from ckptrescue.checkpoints.formats.tolerant_read import open_evidence
from ckptrescue.checkpoints.formats.zipstream import StreamZip

MAX_MEMBERS = 4096
STORED, DEFLATED = 0, 8
_ARCHIVE_KINDS = ("torch-zip", "torch-legacy")


@dataclass
class _Walk:
    """What the judging of members needs of the archive (the tar walk's fields)."""

    size: int
    members: list[TarMember] = field(default_factory=list)
    compressed: bool = False
    complete: bool = True


def _head(fh: BinaryIO, rec: zipwalk.ZipRecord) -> bytes:
    """A member's first bytes (inflated when deflated); b"" when they cannot be had."""
    if rec.data_offset is None or rec.compressed_size is None:
        return b""
    if rec.method == STORED:
        return zipwalk.pread(fh, rec.data_offset, min(HEAD_BYTES, rec.compressed_size))
    if rec.method != DEFLATED:
        return b""
    got = bytearray()
    zipinflate.inflate_member(fh, rec.data_offset, min(rec.compressed_size, 1 << 16),
                              HEAD_BYTES - 1, on_chunk=lambda _at, b: got.extend(b))
    return bytes(got[:HEAD_BYTES])


def _checkpoint_records(fh: BinaryIO) -> list[tuple[zipwalk.ZipRecord, str | None]]:
    """(record, kind) of every member of a plain zip that is not itself a torch zip; [] when
    it is not such a zip or holds no torch zip / legacy stream."""
    from ckptrescue.checkpoints.formats.torch_zip import prefix_of

    layout = zipwalk.read_central(fh, local_headers=False)  # the names first: a torch zip?
    if layout is None or not layout.records or \
            prefix_of([r.name for r in layout.records]) is not None:
        return []
    end = layout.start + layout.archive_size
    members = layout.records[:MAX_MEMBERS]
    for rec in members:  # where each member's data starts: its local header
        zipcentral.attach_local(fh, rec, end)
    out = [(rec, member_kind(_head(fh, rec), rec.name)) for rec in members]
    return out if any(kind in _ARCHIVE_KINDS for _r, kind in out) else []


class ZipArchiveFormat(StorageSalvage):
    """A plain zip archive holding checkpoints (``zip``)."""

    name: ClassVar[str] = "zip"
    priority: ClassVar[int] = 18  # before tar (19) and torch-zip (20): a zip of zips

    @classmethod
    def detect(cls, path: Path) -> bool:
        if not path.is_file():
            return False
        try:
            with open_regular(path) as fh:
                return fh.read(4) == zipwalk.LOCAL_SIG and bool(_checkpoint_records(fh))
        except Exception:  # noqa: BLE001 - detection never raises: a hostile file is not ours
            return False

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        """Each checkpoint member read as it is stored, then judged as a tar's members are."""
        spath = str(path)
        report = CheckpointReport(path=spath, format=cls.name, verdict=Verdict.INTACT,
                                  files=[spath])
        walk = _Walk(size=os.path.getsize(path))
        verdicts: list[Verdict] = []
        parts: list[MemberPart] = []
        with open_evidence(path) as fh:
            found = _checkpoint_records(fh)
            for rec, kind in found:
                size = rec.compressed_size if rec.method == STORED else rec.size
                member = TarMember(rec.name, "file", size or 0, rec.header_offset,
                                   rec.data_offset or 0)
                walk.members.append(member)
                if kind is None:
                    continue
                part = _read_member(fh, rec, member, kind, report, verdicts)
                if part is not None:
                    parts.append(part)
            verdicts += _extractor_disagrees(fh, [rec for rec, kind in found if kind is not None],
                                             report)
        last = {part.member.name: part for part in parts}
        judged = Members(report, walk, options, multi=len(last) > 1, codes=("ZA001", "ZA002"))
        for part in parts:
            verdicts += judged.judge(part, replaced_by=None if last[part.member.name] is part
                                     else last[part.member.name])
        extra = judged.extra()
        extra["zip"] = extra.pop("tar")
        extra["zip"].pop("compressed", None)
        report.extra.update(extra)
        tensormap.finalize(report, verdicts)
        return report


def _extractor_disagrees(fh: BinaryIO, records: list[zipwalk.ZipRecord],
                         report: CheckpointReport) -> list[Verdict]:
    """ZA005 for each checkpoint member that ``zipfile`` would not hand over as the walk read it
    (end records, central and local headers, version, encryption; a stored member's CRC-32)."""
    import zipfile

    def found(message: str, offset: int | None = None) -> list[Verdict]:
        report.findings.append(finding("ZA005", message, evidence=report.path, offset=offset))
        return [Verdict.DAMAGED]

    if not records:
        return []
    fh.seek(0)
    try:
        archive = zipfile.ZipFile(fh)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - any refusal of a hostile directory is the finding
        return found(f"an extractor cannot read the archive's directory: "
                     f"{type(exc).__name__}: {exc}")
    out: list[Verdict] = []
    for rec in {rec.name: rec for rec in records}.values():  # extraction keeps the last (ZA002)
        try:
            info = archive.getinfo(rec.name)
            if info.header_offset != rec.header_offset:
                out += found(f"member {rec.name}: an extractor reads it at byte "
                             f"{info.header_offset}, not {rec.header_offset}", rec.header_offset)
                continue
            with archive.open(info) as member:
                if info.compress_type == zipfile.ZIP_STORED:
                    while member.read(1 << 20):
                        pass
        except Exception as exc:  # noqa: BLE001 - the extractor's refusal is the finding
            out += found(f"member {rec.name}: an extractor refuses it: "
                         f"{type(exc).__name__}: {exc}", rec.header_offset)
    return out


def _read_member(fh: BinaryIO, rec: zipwalk.ZipRecord, member: TarMember, kind: str,
                 report: CheckpointReport, verdicts: list[Verdict]) -> MemberPart | None:
    """The member as the judging needs it: a window (stored torch zip or legacy stream), its
    pickles' bytes, or a torch zip verified as it inflates."""
    if rec.method == STORED and kind in _ARCHIVE_KINDS:
        return MemberPart(member, kind)
    if rec.method not in (STORED, DEFLATED) or rec.data_offset is None:
        report.findings.append(finding(
            "ZA003", f"member {rec.name} is compressed with method {rec.method}: not read, "
            "so neither its bytes nor its pickle are verified", evidence=report.path,
            offset=rec.header_offset))
        verdicts.append(Verdict.UNREADABLE)
        return None
    csize = rec.compressed_size or 0
    if rec.method == STORED:  # a pickle member
        return MemberPart(member, kind, zipwalk.pread(
            fh, rec.data_offset, min(csize, pickle_scan.MAX_PICKLE_BYTES)))
    stream = StreamZip(f"{report.path}:{rec.name}") if kind == "torch-zip" else None
    kept = bytearray()

    def take(_at: int, chunk: bytes) -> None:
        if stream is not None:
            stream.feed(chunk)
        elif len(kept) < pickle_scan.MAX_PICKLE_BYTES:
            kept.extend(chunk[:pickle_scan.MAX_PICKLE_BYTES - len(kept)])

    res = zipinflate.inflate_member(fh, rec.data_offset, csize, rec.size, on_chunk=take)
    why = zipinflate.judge(res, rec.size, rec.crc)
    if why:
        report.findings.append(finding(
            "ZA004", f"member {rec.name}: {why}", evidence=report.path,
            offset=rec.data_offset, length=csize))
        verdicts.append(Verdict.DAMAGED)
    if stream is not None:
        return MemberPart(member, kind, stream=stream, cut=res.error is not None)
    return MemberPart(member, kind, bytes(kept))


FORMATS = [ZipArchiveFormat]
