"""LVM2 physical volumes read without LVM or device-mapper: label, metadata area, text metadata.

Pure: bytes in, volume group out. Layout (lvm2 ``lib/format_text/layout.h``, ``lib/label``),
all little-endian, offsets in bytes from the start of the PV unless said otherwise:

* label header in one of the first four 512-byte sectors: ``"LABELONE"``, sector u64, crc u32,
  offset u32 (of the PV header inside that sector), type ``"LVM2 001"``;
* PV header: uuid[32], device size u64, then ``{offset u64, size u64}`` data areas up to a zero
  entry, then metadata areas up to a zero entry;
* metadata area header: checksum u32, magic ``" LVM2 x[5A%r0N*>"``, version u32, start u64,
  size u64, then ``{offset u64, size u64, checksum u32, flags u32}`` locations; the first is the
  current metadata text, at ``start + offset`` in a circular buffer that wraps to ``start + 512``;
* the text is lvm's config syntax: ``VG { extent_size = N physical_volumes { pv0 { id = "..."
  pe_start = N } } logical_volumes { LV { segment1 { start_extent = N extent_count = N
  type = "striped" stripe_count = 1 stripes = ["pv0", PE] } } } }`` with sizes in 512-byte
  sectors.

Only linear segments (``striped`` with one stripe) map to one contiguous PV range; other segment
types (raid, thin, cache, multi-stripe) are reported, not mapped.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonObject

SECTOR = 512
LABEL_ID = b"LABELONE"
LVM2_TYPE = b"LVM2 001"
MDA_MAGIC = b" LVM2 x[5A%r0N*>"
MDA_HEADER_SIZE = 512
INITIAL_CRC = 0xF597A6CF
RAW_LOCN_IGNORED = 0x00000001

ReadAt = Callable[[int, int], bytes]


class LvmError(ValueError):
    """Not an LVM2 PV, or its label/metadata cannot be read."""


@dataclass(frozen=True)
class Segment:
    lv_offset: int  # bytes from the start of the LV
    length: int
    type: str
    pv: str | None = None  # PV name in the metadata (pv0, ...) for linear segments
    pv_offset: int | None = None  # bytes from the start of the PV (pe_start included)

    @property
    def linear(self) -> bool:
        return self.pv is not None and self.pv_offset is not None


@dataclass
class LogicalVolume:
    name: str
    segments: list[Segment] = field(default_factory=list)
    status: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(s.length for s in self.segments)

    def on_pv(self, pv: str) -> list[Segment]:
        return [s for s in self.segments if s.pv == pv]


@dataclass
class VolumeGroup:
    name: str
    extent_size: int  # bytes
    pvs: dict[str, dict[str, Any]]  # metadata name -> {"id", "pe_start" (bytes), "device"}
    lvs: list[LogicalVolume]
    seqno: int = 0

    def pv_name_of(self, pv_uuid: str) -> str | None:
        want = pv_uuid.replace("-", "")
        for name, pv in self.pvs.items():
            if str(pv.get("id", "")).replace("-", "") == want:
                return name
        return None


@dataclass
class PhysicalVolume:
    uuid: str
    device_size: int
    metadata_text: str
    vg: VolumeGroup
    problems: list[str] = field(default_factory=list)  # metadata copies that were unusable

    @property
    def pv_name(self) -> str | None:
        return self.vg.pv_name_of(self.uuid)


def _u32(b: bytes, off: int) -> int:
    return int(struct.unpack_from("<I", b, off)[0])


def _u64(b: bytes, off: int) -> int:
    return int(struct.unpack_from("<Q", b, off)[0])


def _locns(b: bytes, off: int, limit: int = 16) -> tuple[list[tuple[int, int]], int]:
    out = []
    for _ in range(limit):
        if off + 16 > len(b):
            break
        o, s = _u64(b, off), _u64(b, off + 8)
        off += 16
        if o == 0 and s == 0:
            break
        out.append((o, s))
    return out, off


def _format_uuid(raw: bytes) -> str:
    t = raw.decode("ascii", "replace")
    return "-".join([t[0:6], t[6:10], t[10:14], t[14:18], t[18:22], t[22:26], t[26:32]])


def read_pv(read_at: ReadAt) -> PhysicalVolume:
    """Label, PV header and current metadata of the PV readable through ``read_at(off, n)``."""
    head = read_at(0, 4 * SECTOR)
    for sector in range(4):
        base = sector * SECTOR
        if head[base:base + 8] == LABEL_ID and head[base + 24:base + 32] == LVM2_TYPE:
            break
    else:
        raise LvmError("no LVM2 label (LABELONE) in the first four sectors")
    pvh = base + _u32(head, base + 20)
    if pvh + 48 > len(head):
        raise LvmError("PV header lies outside the label sector")
    uuid = _format_uuid(head[pvh:pvh + 32])
    device_size = _u64(head, pvh + 32)
    _data, off = _locns(head, pvh + 40)
    mdas, _ = _locns(head, off)
    if not mdas:
        raise LvmError("PV has no metadata area (metadatacopies=0): its VG is described only "
                       "on other PVs")
    copies: list[tuple[int, str, VolumeGroup]] = []
    problems: list[str] = []
    for mda_off, mda_size in mdas:
        try:
            text = _read_mda(read_at, mda_off, mda_size)
            if text:
                vg = volume_group(text)
                copies.append((vg.seqno, text, vg))
        except (LvmError, OSError, struct.error) as exc:
            problems.append(f"metadata area at {mda_off}: {exc}")
    if not copies:
        raise LvmError("no readable current metadata" + (f" ({'; '.join(problems)})"
                                                          if problems else ""))
    _seqno, text, vg = max(copies, key=lambda c: c[0])  # the newest valid copy
    return PhysicalVolume(uuid=uuid, device_size=device_size, metadata_text=text, vg=vg,
                          problems=problems)


def _read_mda(read_at: ReadAt, mda_off: int, mda_size: int) -> str:
    hdr = read_at(mda_off, MDA_HEADER_SIZE)
    if hdr[4:20] != MDA_MAGIC:
        raise LvmError(f"metadata area at {mda_off}: bad magic")
    if _u32(hdr, 0) != lvm_crc(hdr[4:MDA_HEADER_SIZE]):
        raise LvmError(f"metadata area at {mda_off}: header checksum mismatch")
    start, size = _u64(hdr, 24), _u64(hdr, 32)
    if size == 0:
        size = mda_size
    off, length = _u64(hdr, 40), _u64(hdr, 48)
    checksum, flags = _u32(hdr, 56), _u32(hdr, 60)
    if flags & RAW_LOCN_IGNORED:
        return ""  # this copy is marked ignored (pvchange --metadataignore)
    if off == 0 or length == 0:
        return ""
    if length > size or off >= size:
        raise LvmError("metadata text outside its area")
    first = min(length, size - off)
    data = read_at(start + off, first)
    if first < length:  # circular buffer: wraps to just after the header
        data += read_at(start + MDA_HEADER_SIZE, length - first)
    if lvm_crc(data) != checksum:
        raise LvmError(f"metadata area at {mda_off}: text checksum mismatch")
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


def lvm_crc(data: bytes, initial: int = INITIAL_CRC) -> int:
    """lvm2's ``calc_crc``: CRC-32 (reflected 0xEDB88320) from ``initial``, no final xor."""
    return (~zlib.crc32(data, ~initial & 0xFFFFFFFF)) & 0xFFFFFFFF


# ---- lvm config text ------------------------------------------------------------------------

_TOKEN = re.compile(r'\s+|#[^\n]*|"(?:[^"\\]|\\.)*"|[{}\[\]=,]|[^\s{}\[\]=,"#]+')


def parse_config(text: str) -> JsonObject:
    """lvm config syntax -> nested dicts (sections), lists, ints and strings."""
    tokens = [t for t in _TOKEN.findall(text) if t.strip() and not t.startswith("#")]
    pos = 0

    def atom(tok: str) -> Any:
        if tok.startswith('"'):
            return re.sub(r"\\(.)", r"\1", tok[1:-1])
        try:
            return int(tok)
        except ValueError:
            try:
                return float(tok)
            except ValueError:
                return tok

    def section(end: str | None) -> JsonObject:
        nonlocal pos
        out: dict[str, Any] = {}
        while pos < len(tokens):
            tok = tokens[pos]
            if tok == end:
                pos += 1
                return out
            name = tok
            pos += 1
            if pos >= len(tokens):
                break
            if tokens[pos] == "{":
                pos += 1
                out[name] = section("}")
            elif tokens[pos] == "=":
                pos += 1
                if pos < len(tokens) and tokens[pos] == "[":
                    pos += 1
                    items: list[Any] = []
                    while pos < len(tokens) and tokens[pos] != "]":
                        if tokens[pos] != ",":
                            items.append(atom(tokens[pos]))
                        pos += 1
                    pos += 1
                    out[name] = items
                elif pos < len(tokens):
                    out[name] = atom(tokens[pos])
                    pos += 1
            else:
                raise LvmError(f"metadata syntax: unexpected {tokens[pos]!r} after {name!r}")
        if end is not None:
            raise LvmError("metadata syntax: unbalanced braces")
        return out

    return section(None)


def volume_group(text: str) -> VolumeGroup:
    tree = parse_config(text)
    vgs = [(k, v) for k, v in tree.items() if isinstance(v, dict) and "extent_size" in v]
    if len(vgs) != 1:
        raise LvmError("metadata does not describe exactly one volume group")
    name, vg = vgs[0]
    extent = int(vg["extent_size"]) * SECTOR
    pvs: dict[str, dict[str, Any]] = {}
    for pv_name, pv in (vg.get("physical_volumes") or {}).items():
        if isinstance(pv, dict):
            pvs[pv_name] = {"id": pv.get("id"), "device": pv.get("device"),
                            "pe_start": int(pv.get("pe_start", 0)) * SECTOR}
    lvs: list[LogicalVolume] = []
    for lv_name, lv in (vg.get("logical_volumes") or {}).items():
        if not isinstance(lv, dict):
            continue
        out = LogicalVolume(lv_name, status=[str(s) for s in lv.get("status", [])])
        segs = sorted((v for k, v in lv.items() if k.startswith("segment")
                       and isinstance(v, dict)), key=lambda s: int(s.get("start_extent", 0)))
        for seg in segs:
            start = int(seg.get("start_extent", 0)) * extent
            length = int(seg.get("extent_count", 0)) * extent
            kind = str(seg.get("type", ""))
            stripes = seg.get("stripes") or []
            if (kind == "striped" and int(seg.get("stripe_count", 0)) == 1
                    and len(stripes) == 2 and stripes[0] in pvs):
                pv = str(stripes[0])
                out.segments.append(Segment(start, length, "linear", pv,
                                            pvs[pv]["pe_start"] + int(stripes[1]) * extent))
            else:
                out.segments.append(Segment(start, length, kind or "unknown"))
        lvs.append(out)
    return VolumeGroup(name=name, extent_size=extent, pvs=pvs, lvs=lvs,
                       seqno=int(vg.get("seqno", 0)))
