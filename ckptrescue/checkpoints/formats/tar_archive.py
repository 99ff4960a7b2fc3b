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
* a legacy torch.save stream (its first pickle the magic number, any protocol) - in a plain
  tar, probed over its byte window exactly as a file (``torch_legacy.probe_stream``); in a
  compressed tar, its five pickles scanned;
* a pickle (``PROTO`` opcode, or a ``.pkl``/``.pickle`` name) - scanned as a standalone pickle,
  and every pickle after it (``pickle.load`` called again; it resolves every global: off the
  exact list is ``unsafe``);
* anything else - listed, not judged.

A damaged member header, a cut archive, a zero block hiding later members, a bad gzip CRC-32 or
zstd checksum are findings on the archive (``TA001``-``TA003``). Tensor names are prefixed with
the member's name when the archive holds more than one checkpoint member. Two members of one
name (``TA006``): extraction keeps the last, so only its tensors are mapped; the earlier one is
still judged, and still makes the archive ``unsafe`` when it can run code.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, Verdict
from ckptrescue.checkpoints.families import tarwalk
from ckptrescue.checkpoints.formats import pickle_policy, pickle_scan, tensormap, torch_legacy
from ckptrescue.checkpoints.formats.pickle_verdict import judge
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.checkpoints.formats.tensormap import StorageSalvage, finding
from ckptrescue.checkpoints.formats.tolerant_read import open_evidence
from ckptrescue.checkpoints.formats.zip_window import ZipWindows
from ckptrescue.checkpoints.formats.zipstream import StreamZip
from ckptrescue.model import JsonObject

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


_HEAD_BYTES = torch_legacy.DETECT_BYTES  # enough to tell a legacy torch.save stream
_MAX_PICKLES = 16  # pickles read one after the other in a member (a legacy stream: five)


def _kind(head: bytes, name: str) -> str | None:
    if head[:4] == b"PK\x03\x04":
        return "torch-zip"
    if torch_legacy.is_legacy_head(head):
        return "torch-legacy"
    if (len(head) >= 2 and head[0] == 0x80 and head[1] <= 5) or name.endswith(_PICKLE_SUFFIXES):
        return "pickle"
    return None


class TarArchiveFormat(StorageSalvage):
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
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        """The members walked (problems of the archive itself), each checkpoint member judged
        as its own kind, then the archive's listing."""
        spath = str(path)
        report = CheckpointReport(path=spath, format=cls.name, verdict=Verdict.INTACT,
                                  files=[spath])
        tw, parts = _checkpoint_members(path)
        verdicts = _walk_problems(report, tw, path)
        # extraction keeps the last member of a name: the earlier ones are not the checkpoint
        last = {part.member.name: part for part in parts}
        judged = _Members(report, tw, options, multi=len(last) > 1)
        for part in parts:
            verdicts += judged.judge(part, replaced_by=None if last[part.member.name] is part
                                     else last[part.member.name])
        if not parts:
            report.findings.append(finding(
                "TA005", f"{path.name}: no checkpoint member (torch zip or pickle) among "
                f"{len(tw.members)} member(s)", evidence=spath))
            verdicts.append(Verdict.UNREADABLE)
        report.extra.update(judged.extra())
        tensormap.finalize(report, verdicts)
        return report


FORMATS = [TarArchiveFormat]


@dataclass
class _Part:
    """A checkpoint member: its header, its kind, and what was read of it (a pickle's bytes,
    or a compressed archive's zip verified as it streamed past)."""

    member: tarwalk.TarMember
    kind: str
    data: bytes = b""
    stream: StreamZip | None = None
    cut: bool = False


def _checkpoint_members(path: Path) -> tuple[Any, list[_Part]]:
    """The archive walked once; its checkpoint members (torch zips and pickles)."""
    spath = str(path)
    parts: list[_Part] = []

    def visit(member: tarwalk.TarMember, reader: tarwalk.MemberReader) -> None:
        head = reader.read(_HEAD_BYTES)
        kind = _kind(head, member.name)
        if kind == "torch-zip":
            sz = StreamZip(f"{spath}:{member.name}")
            sz.feed(head)
            while chunk := reader.read(_CHUNK):
                sz.feed(chunk)
            parts.append(_Part(member, kind, stream=sz, cut=reader.left > 0))
        elif kind is not None:  # a pickle, or a legacy stream's pickles (no offsets here)
            parts.append(_Part(member, kind, head + reader.read(
                pickle_scan.MAX_PICKLE_BYTES - len(head))))

    tw = tarwalk.walk(path, visit)
    if not tw.compressed:
        with open_regular(path) as fh:
            for m in tarwalk.iter_files(tw):
                fh.seek(m.data_offset)
                kind = _kind(fh.read(min(_HEAD_BYTES, m.size)), m.name)
                if kind == "pickle":
                    fh.seek(m.data_offset)
                    parts.append(_Part(m, kind, fh.read(min(m.size,
                                                            pickle_scan.MAX_PICKLE_BYTES))))
                elif kind in ("torch-zip", "torch-legacy"):
                    parts.append(_Part(m, kind))
    return tw, parts


def _walk_problems(report: CheckpointReport, tw: Any, path: Path) -> list[Verdict]:
    """What the walk found wrong with the archive itself (TA001-TA003)."""
    verdicts = []
    for kind, message, offset in tw.problems:
        code = {"truncated": "TA002", "header": "TA001"}.get(kind, "TA003")
        report.findings.append(finding(code, f"{path.name}: {message}", evidence=report.path,
                                       offset=None if tw.compressed else offset,
                                       details={"kind": kind}))
        verdicts.append(Verdict.TRUNCATED if kind == "truncated" else Verdict.DAMAGED)
    return verdicts


@dataclass
class _Members:
    """The checkpoint members judged in turn, into one report; what their zips share is
    gathered by ``zips``, what the pickles bring beside."""

    report: CheckpointReport
    tw: Any
    options: ProbeOptions
    multi: bool
    listed: list[dict[str, Any]] = field(default_factory=list)
    # finding codes: a member not intact, a member replaced by a later one of its name
    codes: tuple[str, str] = ("TA004", "TA006")
    zips: ZipWindows = field(init=False)

    def __post_init__(self) -> None:
        self.zips = ZipWindows(self.report, numeric=self.options.numeric,
                               extra_allowed=self.options.extra_allowed)

    def _allowed(self, g: str) -> bool:
        return pickle_policy.standalone_allowed(g) or pickle_policy.extra_allowed(
            g, self.options.extra_allowed)

    def _offset(self, m: tarwalk.TarMember) -> int | None:
        return None if self.tw.compressed else m.data_offset

    def judge(self, part: _Part, replaced_by: _Part | None = None) -> list[Verdict]:
        """One member: its findings and tensors into the report, its own verdict listed (and
        a TA004 finding when it is not intact); returns its verdicts. A member ``replaced_by``
        a later one of the same name keeps only what makes it unsafe (TA006)."""
        m, report = part.member, self.report
        prefix = f"{m.name}/" if self.multi else ""
        before, first = len(report.findings), len(report.tensors)
        if part.data or part.kind == "pickle":
            own = self._pickle(part)
        elif part.stream is not None:
            own = self._stream(part, prefix)
        elif part.kind == "torch-legacy":
            own = self._legacy(part, prefix)
        else:
            own = self._zip(part, prefix)
        mine = CheckpointReport(path=report.path, format=part.kind, verdict=Verdict.INTACT,
                                tensors=report.tensors[first:],
                                findings=report.findings[before:])
        tensormap.finalize(mine, own)
        self.listed.append({"name": m.name, "kind": part.kind, "size": m.size,
                            "offset": self._offset(m), "verdict": str(mine.verdict)})
        if replaced_by is not None:
            del report.tensors[first:]
            later = self._offset(replaced_by.member)
            report.findings.append(finding(
                self.codes[1], f"member {m.name} appears again later in the archive"
                + (f" (at {later})" if later is not None else "") + ": extraction keeps only "
                f"the last one, so this one ({mine.verdict}) is not what a loader reads",
                evidence=report.path, offset=self._offset(m), length=m.size,
                details={"member": m.name, "verdict": str(mine.verdict)}))
            return [v for v in own if v is Verdict.UNSAFE] + [Verdict.SUSPECT]
        if mine.verdict is not Verdict.INTACT:
            report.findings.append(finding(
                self.codes[0], f"member {m.name} ({part.kind}) is {mine.verdict}",
                evidence=report.path, offset=self._offset(m), length=m.size,
                details={"member": m.name, "verdict": str(mine.verdict)}))
        return own

    def _pickle(self, part: _Part) -> list[Verdict]:
        """Every pickle of the member, one after the other, as repeated ``pickle.load`` calls
        read them (a legacy stream's five; the bytes after them are its storages)."""
        data, pos, verdicts, scans = part.data, 0, [], []
        legacy = part.kind == "torch-legacy"
        for _ in range(5 if legacy else _MAX_PICKLES):
            scan = pickle_scan.scan_pickle(data[pos:], start=pos, mode="memory", partial=True)
            scans.append(scan)
            found, vs = judge(scan, self.report.path, allowed=self._allowed,
                              weights_only=False, standalone=True,
                              label=f"{Path(self.report.path).name}:{part.member.name}")
            self.report.findings.extend(found)
            verdicts += vs
            self.zips.globals_.update(scan.globals)
            self.zips.unsafe.update(g for f in found if f.code == "PK001"
                                    for g in f.details.get("globals", []))
            pos += scan.end
            if scan.error or scan.end <= 0 or len(data) < pos + 2 or data[pos] != 0x80 \
                    or data[pos + 1] > 5:
                break
        if legacy and not any(s.error for s in scans):
            prefix = f"{part.member.name}/" if self.multi else ""
            verdicts += torch_legacy.unread_stream(scans, part.member.size, self.report, prefix)
        return verdicts

    def _legacy(self, part: _Part, prefix: str) -> list[Verdict]:
        """A legacy stream in a plain tar, probed over its byte window exactly as a file."""
        m = part.member
        end = min(m.data_offset + m.size, self.tw.size)
        one = CheckpointReport(path=self.report.path, format="torch-legacy",
                               verdict=Verdict.INTACT)
        with open_evidence(Path(self.report.path)) as fh:
            verdicts = torch_legacy.probe_stream(fh, one, self.options, start=m.data_offset,
                                                 end=end, name_prefix=prefix)
        for rec in one.tensors:
            if prefix and rec.storage is not None:
                rec.storage = f"{prefix}{rec.storage}"
        self.report.tensors.extend(one.tensors)
        self.report.findings.extend(one.findings)
        self.zips.globals_.update(one.extra.get("globals", []))
        self.zips.unsafe.update(one.extra.get("unsafe_globals", []))
        self.zips.strides.update(one.extra.get("strides", {}))
        for key, st in one.extra.get("storages", {}).items():
            self.zips.storages[f"{prefix}{key}"] = st
        return [*verdicts, *([Verdict.TRUNCATED] if end < m.data_offset + m.size else [])]

    def _stream(self, part: _Part, prefix: str) -> list[Verdict]:
        assert part.stream is not None
        tensors, info = part.stream.finish(cut=part.cut)
        self.report.findings.extend(part.stream.findings)
        for t in tensors:
            t.name = prefix + t.name
            t.file = self.report.path
        self.report.tensors.extend(tensors)
        self.zips.globals_.update(info["globals"])
        self.zips.unsafe.update(info["unsafe_globals"])
        return list(part.stream.verdicts)

    def _zip(self, part: _Part, prefix: str) -> list[Verdict]:
        """A torch zip in a plain tar, probed over its byte window exactly as a file."""
        m = part.member
        end = min(m.data_offset + m.size, self.tw.size)
        with open_evidence(Path(self.report.path)) as fh:
            z = self.zips.probe(fh, m.data_offset, end, prefix)
        return [*z.verdicts, *([Verdict.TRUNCATED] if end < m.data_offset + m.size else [])]

    def extra(self) -> JsonObject:
        tw = self.tw
        return {
            **self.zips.extra(),
            "tar": {"compressed": tw.compressed, "complete": tw.complete,
                    "members": [{"name": m.name, "size": m.size,
                                 "offset": None if tw.compressed else m.data_offset}
                                for m in tarwalk.iter_files(tw)][:4096],
                    "checkpoints": self.listed}}


# Public names for the other archive of checkpoints (``zip_archive``: a plain zip of them):
# the same member kinds and the same judging of each member.
MemberPart = _Part
Members = _Members
member_kind = _kind
HEAD_BYTES = _HEAD_BYTES
