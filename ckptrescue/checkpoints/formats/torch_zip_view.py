"""A torch zip as ``torch.load`` sees it: reader refusals as findings, and the record torch reads.

Used by :mod:`torch_zip` when the central directory is found. :func:`reader_findings` turns every
rule of :mod:`miniz_rules` the archive breaks into a finding (verdict ``damaged``: torch refuses
the file or reads other bytes than the ones the probe checked), and :class:`Records` answers
"which record does torch read for this name" (miniz's case-insensitive sorted lookup, so with
duplicate names it is the record torch really reads, not the first or last).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.formats import miniz_rules, zipinflate, zipwalk
from ckptrescue.checkpoints.formats.tensormap import SOURCE
from ckptrescue.checkpoints.formats.tensormap import finding as _finding
from ckptrescue.codes.zipcontainer import CODES as ZIP_CODES
from ckptrescue.model import Finding

# Records torch's reader opens besides data.pkl and data/<key> (init and torch.load)
READ_META = (".data/serialization_id", ".data/version", "version", "byteorder",
             ".format_version", ".storage_alignment")
MIN_VERSION, MAX_VERSION = 1, 10  # caffe2::serialize kMin/kMaxSupportedFileFormatVersion
DEFLATE_LIMIT = 256 * 1024 * 1024  # a deflated data.pkl/metadata record is inflated up to this


def finding(code: str, title: str, **kw: Any) -> Finding:
    """Findings for this module's codes (zipcontainer) and the checkpoint catalogue's."""
    if code not in ZIP_CODES:
        return _finding(code, title, **kw)
    return Finding(code=code, severity=ZIP_CODES[code][0], title=title,
                   evidence=kw.get("evidence"), offset=kw.get("offset"),
                   length=kw.get("length"), source=SOURCE, tensors=tuple(kw.get("tensors", ())),
                   details=kw.get("details") or {})


@dataclass
class Records:
    """Name -> the record torch reads; iteration gives every central-directory name."""

    layout: zipwalk.ZipLayout
    view: miniz_rules.TorchView | None = None
    by_name: dict[str, zipwalk.ZipRecord] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_name = self.layout.by_name()

    def get(self, full: str) -> zipwalk.ZipRecord | None:
        view = self.view
        if view is not None and view.prefix is not None and full.startswith(view.prefix):
            return view.locate(full[len(view.prefix):])
        return self.by_name.get(full)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.by_name)

    def items(self) -> list[tuple[str, zipwalk.ZipRecord]]:
        return [(n, r) for n in self.by_name if (r := self.get(n)) is not None]


def reader_findings(fh: BinaryIO, layout: zipwalk.ZipLayout, path: str,
                    ) -> tuple[Records, list[Finding], list[Verdict]]:
    """Apply torch's archive-level reader rules (per-record reads: :func:`check_reads`)."""
    view = miniz_rules.torch_view(layout)
    findings: list[Finding] = []
    verdicts: list[Verdict] = []
    for r in view.refusals:
        findings.append(finding(r.code, f"torch's zip reader refuses this archive: {r.message}",
                                evidence=path, offset=r.offset))
        verdicts.append(Verdict.DAMAGED)
    records = Records(layout, view if view.prefix is not None else None)
    groups: dict[bytes, list[zipwalk.ZipRecord]] = {}
    for rec in view.entries:
        groups.setdefault(miniz_rules.lower_name(rec.name_raw), []).append(rec)
    for recs in groups.values():
        if len(recs) < 2:
            continue
        read = records.get(recs[0].name)
        which = f"central-directory entry {read.index} (header at {read.header_offset})" \
            if read is not None else "none of them"
        findings.append(finding(
            "TZ016", f"{len(recs)} records named {recs[0].name!r:.80}: torch reads {which}",
            evidence=path, offset=read.header_offset if read else None,
            details={"entries": [r.index for r in recs],
                     "read": read.index if read is not None else None}))
        verdicts.append(Verdict.SUSPECT)
    if view.prefix is not None:
        version = records.get(view.prefix + ".data/version") or \
            records.get(view.prefix + "version")
        problem = _version_problem(fh, version)
        if problem:
            findings.append(finding("TZ015", f"torch's reader refuses this archive: {problem}",
                                    evidence=path, offset=version.data_offset if version else None))
            verdicts.append(Verdict.DAMAGED)
        problem = _byteorder_problem(fh, records.get(view.prefix + "byteorder"))
        if problem:
            findings.append(finding("TZ015", f"torch's reader refuses this archive: {problem}",
                                    evidence=path))
            verdicts.append(Verdict.DAMAGED)
    return records, findings, verdicts


def _byteorder_problem(fh: BinaryIO, rec: zipwalk.ZipRecord | None) -> str | None:
    """torch.load: a ``byteorder`` record, when present, must be exactly ``little`` or ``big``."""
    if rec is None or rec.data_offset is None or rec.method != 0:
        return None
    raw = zipwalk.pread(fh, rec.data_offset, min(rec.size or 0, 16))
    if raw not in (b"little", b"big"):
        return f"unknown endianness type {raw[:16]!r} in the byteorder record"
    return None


def _version_problem(fh: BinaryIO, rec: zipwalk.ZipRecord | None) -> str | None:
    if rec is None:
        return "no version record"
    if rec.data_offset is None or rec.method != 0:
        return None  # reported as a read problem of the record
    raw = zipwalk.pread(fh, rec.data_offset, min(rec.size or 0, 64))
    text = raw.decode("latin-1").lstrip(" \t\n\r\f\v")
    digits = ""
    for ch in text:
        if not ch.isdigit() or not ch.isascii():
            break
        digits += ch
    if not digits:
        return f"version record {raw[:20]!r} is not a number"
    if not MIN_VERSION <= int(digits) <= MAX_VERSION:
        return f"file format version {int(digits)} outside {MIN_VERSION}..{MAX_VERSION}"
    return None


def check_reads(layout: zipwalk.ZipLayout, records: Records, names: list[str], path: str,
                end: int) -> tuple[list[Finding], list[Verdict]]:
    """Each record torch reads (``names``, full): a read refusal, no bytes, or overlap."""
    findings: list[Finding] = []
    verdicts: list[Verdict] = []
    spans = _overlapping(layout)
    seen: set[int] = set()
    for full in names:
        rec = records.get(full)
        if rec is None or id(rec) in seen:
            continue
        seen.add(id(rec))
        refusal = miniz_rules.read_refusal(rec, end)
        problem = refusal.message if refusal else None
        code = refusal.code if refusal else "TZ017"
        if problem is None:
            why = miniz_rules.reads_nothing(rec)
            problem = f"{rec.name!r:.80}: {why}" if why else None
        if problem is None and id(rec) in spans:
            problem = f"{rec.name!r:.80}: its bytes overlap another record (header at " \
                f"{spans[id(rec)]})"
        if problem:
            findings.append(finding(code, f"torch cannot read this record as stored: {problem}",
                                    evidence=path, offset=rec.header_offset))
            verdicts.append(Verdict.DAMAGED)
    return findings, verdicts


def _overlapping(layout: zipwalk.ZipLayout) -> dict[int, int]:
    """Records whose local header + data span overlaps another's: id(record) -> other header."""
    spans = sorted(((r.header_offset, max(r.data_end or 0, r.header_offset + 30), r)
                    for r in layout.records), key=lambda s: (s[0], s[1]))
    out: dict[int, int] = {}
    reach, owner = -1, None
    for start, stop, rec in spans:
        if owner is not None and start < reach:
            out[id(rec)] = owner.header_offset
            out.setdefault(id(owner), rec.header_offset)
        if stop > reach:
            reach, owner = stop, rec
    return out


def inflate_small(fh: BinaryIO, rec: zipwalk.ZipRecord) -> tuple[bytes | None, str | None]:
    """A deflated metadata/pickle record inflated (bounded), or why it does not read back."""
    if rec.data_offset is None or rec.compressed_size is None:
        return None, "no data offset"
    if (rec.size or 0) > DEFLATE_LIMIT:
        return None, f"records {rec.size} bytes, above the {DEFLATE_LIMIT} byte limit"
    parts: list[bytes] = []
    res = zipinflate.inflate_member(fh, rec.data_offset, rec.compressed_size, rec.size,
                                    max_out=DEFLATE_LIMIT,
                                    on_chunk=lambda _o, c: parts.append(bytes(c)))
    why = zipinflate.judge(res, rec.size, None)
    return (None, why) if why else (b"".join(parts), None)
