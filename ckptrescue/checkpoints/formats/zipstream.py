"""A torch zip verified as a stream: for a member of a compressed tar, read once, never copied.

A ``torch.save`` zip inside a ``.tar.gz``/``.tar.zst`` has no file offsets to seek to, so it is
verified in the one order the decompressor gives its bytes (:class:`StreamZip`, fed chunk by
chunk). torch writes each record with a local header whose sizes are 0 and a data descriptor
after the data (flag 0x08): a record ends at the first descriptor whose compressed size equals
the bytes read since the record started (the CRC-32 computed so far decides between
candidates); a record with sizes in its header ends there. Per record the CRC-32 is computed
while the bytes pass and compared with its descriptor and with the central directory at the
end; ``data.pkl`` (kept, bounded by the pickle cap) is scanned under torch's own rules, so its
globals make the member ``unsafe`` as in a file, and its storages' declared sizes are compared
with their records. Tensors get a status but no file offset (``offset`` None: not salvageable
in place). What cannot be checked this way - the numeric scan, the reader rules that depend on
the central directory's raw fields - is left to a probe of the extracted file.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.checkpoints.base import TensorRecord, Verdict
from ckptrescue.checkpoints.formats import pickle_scan, tensormap, torch_rebuild
from ckptrescue.checkpoints.formats.pickle_verdict import judge
from ckptrescue.checkpoints.formats.tensormap import StorageCheck, finding
from ckptrescue.model import Finding

LOCAL, DESC, CENTRAL = b"PK\x03\x04", b"PK\x07\x08", b"PK\x01\x02"
_DATA_RE = re.compile(r"^(?P<prefix>(?:.*/)?)data/(?P<key>[^/]+)$")


@dataclass
class _Record:
    name: str
    flags: int
    method: int
    crc_header: int
    csize_header: int
    start: int  # stream offset of the data
    crc: int = 0
    length: int = 0
    crc_stored: int | None = None
    size_stored: int | None = None
    done: bool = False


@dataclass
class StreamZip:
    """Feed a member's bytes in order (:meth:`feed`), then :meth:`finish` for the result."""

    evidence: str
    name_prefix: str = ""
    findings: list[Finding] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    records: list[_Record] = field(default_factory=list)
    pickle_bytes: bytearray = field(default_factory=bytearray)
    central: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (crc, csize)
    _buf: bytearray = field(default_factory=bytearray)
    _pos: int = 0  # stream offset of _buf[0]
    _cur: _Record | None = None
    _state: str = "local"  # local, data, central, end, broken
    _problem: str | None = None

    # -- feeding ---------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        if self._state in ("end", "broken"):
            return
        if self._state == "central" and len(self._buf) > (64 << 20):
            return  # a central directory this large is not a torch archive's
        self._buf += chunk
        while self._step():
            pass

    def _consume(self, n: int) -> bytes:
        out = bytes(self._buf[:n])
        del self._buf[:n]
        self._pos += n
        return out

    def _step(self) -> bool:  # noqa: C901 - one branch per state
        if self._state == "local":
            if len(self._buf) < 4:
                return False
            sig = bytes(self._buf[:4])
            if sig == CENTRAL or sig == b"PK\x06\x06" or sig == b"PK\x05\x06":
                self._state = "central"
                return True
            if sig != LOCAL:
                self._broken(f"no local header at member byte {self._pos} ({sig!r})")
                return False
            if len(self._buf) < 30:
                return False
            (_, _, flags, method, _, _, crc, csize, _usize, nlen,
             xlen) = struct.unpack_from("<4sHHHHHIIIHH", self._buf, 0)
            if len(self._buf) < 30 + nlen + xlen:
                return False
            name = bytes(self._buf[30:30 + nlen]).decode("utf-8", "replace")
            extra = bytes(self._buf[30 + nlen:30 + nlen + xlen])
            if csize == 0xFFFFFFFF:
                csize = _zip64_csize(extra) or 0
            self._consume(30 + nlen + xlen)
            self._cur = _Record(name, flags, method, crc, csize, self._pos)
            self.records.append(self._cur)
            self._state = "data"
            return True
        if self._state == "data":
            return self._data()
        if self._state == "central":
            return self._central()
        return False

    def _data(self) -> bool:
        rec = self._cur
        assert rec is not None
        if not rec.flags & 0x08:  # sizes in the header
            want = rec.csize_header - rec.length
            take = min(want, len(self._buf))
            self._take(rec, take)
            if rec.length == rec.csize_header:
                rec.crc_stored, rec.size_stored, rec.done = rec.crc_header, rec.length, True
                self._state = "local"
                return True
            return False
        # a data descriptor ends the record: the first whose size matches what was read
        start = 0
        while True:
            at = self._buf.find(DESC, start)
            if at < 0:
                keep = 3 + 20  # a signature may straddle the chunk boundary
                if len(self._buf) > keep:
                    self._take(rec, len(self._buf) - keep)
                return False
            if len(self._buf) < at + 24:
                if at:
                    self._take(rec, at)
                return False
            crc_here = zlib.crc32(self._buf[:at], rec.crc) & 0xFFFFFFFF
            length = rec.length + at
            d_crc, c32, _u32 = struct.unpack_from("<III", self._buf, at + 4)
            d_crc64, c64, _u64 = struct.unpack_from("<IQQ", self._buf, at + 4)
            if c64 == length and (d_crc64 == crc_here or bytes(self._buf[at + 24:at + 28])
                                  in (LOCAL, CENTRAL)):
                dlen, stored_crc = 24, d_crc64
            elif c32 == length and (d_crc == crc_here or bytes(self._buf[at + 16:at + 20])
                                    in (LOCAL, CENTRAL)):
                dlen, stored_crc = 16, d_crc
            else:
                start = at + 1
                continue
            self._take(rec, at)
            self._consume(dlen)
            rec.crc_stored, rec.size_stored, rec.done = stored_crc, rec.length, True
            self._state = "local"
            return True

    def _take(self, rec: _Record, n: int) -> None:
        data = self._consume(n)
        rec.crc = zlib.crc32(data, rec.crc) & 0xFFFFFFFF
        rec.length += n
        if rec.name.endswith("data.pkl") and len(self.pickle_bytes) < \
                pickle_scan.MAX_PICKLE_BYTES:
            self.pickle_bytes += data[:pickle_scan.MAX_PICKLE_BYTES - len(self.pickle_bytes)]

    def _central(self) -> bool:
        while len(self._buf) >= 46 and bytes(self._buf[:4]) == CENTRAL:
            (crc, csize, _usize, nlen, xlen, clen) = struct.unpack_from("<IIIHHH", self._buf,
                                                                         16)
            total = 46 + nlen + xlen + clen
            if len(self._buf) < total:
                return False
            name = bytes(self._buf[46:46 + nlen]).decode("utf-8", "replace")
            if csize == 0xFFFFFFFF:
                csize = _zip64_csize(bytes(self._buf[46 + nlen:46 + nlen + xlen])) or csize
            self.central[name] = (crc, csize)
            self._consume(total)
        if len(self._buf) >= 4 and bytes(self._buf[:4]) in (b"PK\x06\x06", b"PK\x05\x06"):
            self._state = "end"
        return False

    def _broken(self, why: str) -> None:
        self._state = "broken"
        self._problem = why

    # -- the result ----------------------------------------------------------------------------
    def finish(self, *, cut: bool = False) -> tuple[list[TensorRecord], dict[str, Any]]:
        """Tensor records and what was found (``cut``: the member's bytes ended early)."""
        ev = self.evidence
        if self._cur is not None and not self._cur.done:
            self.findings.append(finding(
                "TZ006", f"{self._cur.name}: the member ends inside this record", evidence=ev))
            self.verdicts.append(Verdict.TRUNCATED)
        elif self._problem:
            self.findings.append(finding("TZ011", f"zip structure: {self._problem}",
                                         evidence=ev))
            self.verdicts.append(Verdict.DAMAGED)
        elif self._state != "end":
            self.findings.append(finding(
                "TZ001", "no end-of-central-directory record in the member: truncated"
                + (" (the archive was cut)" if cut else ""), evidence=ev))
            self.verdicts.append(Verdict.TRUNCATED)
        by_name = {r.name: r for r in self.records}
        for r in self.records:
            if not r.done:
                continue
            bad = r.crc_stored is not None and r.crc != r.crc_stored
            cd = self.central.get(r.name)
            if cd is not None and cd[0] != r.crc:
                bad = True
            if bad and not _DATA_RE.match(r.name):
                self.findings.append(finding(
                    "TZ002" if r.name.endswith("data.pkl") else "TZ012",
                    f"{r.name}: CRC-32 mismatch", evidence=ev))
                self.verdicts.append(Verdict.DAMAGED)
        pkl = next((r for r in self.records if r.name.endswith("data.pkl")), None)
        if pkl is None:
            self.findings.append(finding("TZ009", "data.pkl record missing: tensor names lost",
                                         evidence=ev))
            self.verdicts.append(Verdict.INCOMPLETE)
            return [], {"globals": [], "unsafe_globals": []}
        prefix = pkl.name[: -len("data.pkl")]
        scan = torch_rebuild.scan_torch_pickle(bytes(self.pickle_bytes), partial=True)
        unsafe = scan.unsafe_globals()
        if unsafe:
            self.findings.append(finding(
                "PK001", "pickle references globals outside the weights-only allowlist: "
                + ", ".join(unsafe), evidence=ev, details={"globals": unsafe}))
            self.verdicts.append(Verdict.UNSAFE)
        extra, extra_verdicts = judge(scan, ev, allowed=lambda g: True, weights_only=True,
                                      label="data.pkl")
        self.findings.extend(extra)
        self.verdicts.extend(extra_verdicts)
        named = [(self.name_prefix + n if n else self.name_prefix.rstrip(".") or "<root>", ref)
                 for n, ref in pickle_scan.iter_named(scan.root)]
        refs_by_key: dict[str, list[Any]] = {}
        for _n, ref in named:
            pref = ref.storage if isinstance(ref, pickle_scan.TensorRef) else ref
            if isinstance(pref, pickle_scan.PersistentRef) and pref.is_storage:
                refs_by_key.setdefault(pref.key, []).append(ref)
        storages: dict[str, StorageCheck] = {}
        for key, refs in refs_by_key.items():
            first = next((r for r in refs if isinstance(r, pickle_scan.PersistentRef)),
                         refs[0].storage if isinstance(refs[0], pickle_scan.TensorRef) else None)
            dtype = tensormap.storage_dtype(refs)
            sc = StorageCheck(key=key, file=ev, dtype=dtype,
                              declared=tensormap.declared_nbytes(first, dtype)
                              if first is not None else None)
            storages[key] = sc
            rec = by_name.get(f"{prefix}data/{key}")
            if rec is None:
                sc.mark("truncated" if self._state != "end" else "missing",
                        f"record {prefix}data/{key} not in the member")
                continue
            if not rec.done:
                sc.mark("truncated", "the member ends inside this record")
                continue
            cd = self.central.get(rec.name)
            if (rec.crc_stored is not None and rec.crc != rec.crc_stored) or \
                    (cd is not None and cd[0] != rec.crc):
                sc.mark("damaged", "CRC-32 mismatch (stored "
                        f"{rec.crc_stored or (cd or (0,))[0]:08x}, computed {rec.crc:08x})",
                        "TZ002")
            if sc.declared is not None and rec.length != sc.declared:
                sc.mark("damaged", f"{rec.length} bytes, the pickle declares "
                        f"{sc.declared}", "TZ004")
            sc.crc_stored, sc.crc_actual = rec.crc_stored, rec.crc
        tensors = tensormap.tensor_records(named, storages)
        for t in tensors:
            t.offset = None  # bytes inside a compressed stream: no file offset
            t.reasons.append("inside a compressed archive: verified as a stream, not "
                             "salvageable in place")
        for key, sc in storages.items():
            if sc.status in ("damaged", "truncated", "missing") and sc.codes:
                names = [t.name for t in tensors if t.storage == key]
                code = sc.codes[0][0]
                self.findings.append(finding(code, f"{prefix}data/{key}: "
                                             + "; ".join(sc.reasons), evidence=ev,
                                             tensors=names))
        return tensors, {"globals": sorted(set(scan.globals)), "unsafe_globals": unsafe,
                         "storages": tensormap.storage_map(storages)}


def _zip64_csize(extra: bytes) -> int | None:
    """The compressed size from a zip64 extra field (0x0001), when it carries one."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, pos)
        if tag == 1 and size >= 16:
            return struct.unpack_from("<Q", extra, pos + 12)[0]
        pos += 4 + size
    return None
