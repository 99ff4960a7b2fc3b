"""safetensors files: header rules, byte coverage, truncation and numerics (reference §2).

``[0:8)`` u64 LE header length N; ``[8:8+N)`` UTF-8 JSON (``{name: {dtype, shape,
data_offsets}}`` + optional ``__metadata__``); then the byte buffer. Checked: header length cap
(100 MB) and bounds, JSON, dtypes, ``prod(shape) x dtype size == end - begin``, overlaps, holes,
``8 + N + last_end == file length`` (short = truncated: complete tensors stay salvageable).
There is no checksum: payloads are checked numerically only.

Detected from structure: a plausible N followed by optional spaces and ``{`` — independent of the
file name.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.formats import dtypes, numeric, tensormap, zipwalk
from ckptrescue.checkpoints.formats.jsondepth import too_deep
from ckptrescue.checkpoints.formats.regular_file import head_of
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.checkpoints.formats.tolerant_read import open_evidence
from ckptrescue.model import JsonObject

MAX_HEADER = 100_000_000
# serde_json (the Rust loader's parser) refuses nesting deeper than 128; a valid header needs 3.
MAX_DEPTH = 128


class HeaderProblem(ValueError):
    """The header is not what the safetensors loader accepts; ``code`` names the rule."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


JSON_SPACE = b" \t\n\r"  # what serde_json skips between tokens (a form feed is refused)
# Fields serde's derived deserializers take once: a second one is "duplicate field" (the
# tensor map itself is a HashMap: a repeated tensor name is taken, the last one winning)
_ONCE_AT_TOP = ("__metadata__",)
_ONCE_IN_ENTRY = ("dtype", "shape", "data_offsets")


class _Object(dict):  # type: ignore[type-arg]
    """A JSON object that remembers which keys it was given more than once."""

    repeated: frozenset[str] = frozenset()


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        obj.repeated = frozenset(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def _duplicate_field(header: dict[str, Any]) -> str | None:
    """A struct field given twice (serde: "duplicate field"), at the top or in an entry."""
    for key in _ONCE_AT_TOP:
        if key in getattr(header, "repeated", ()):
            return key
    for name, entry in header.items():
        if name != "__metadata__":
            for key in _ONCE_IN_ENTRY:
                if key in getattr(entry, "repeated", ()):
                    return key
    return None


def parse_header_text(text: bytes) -> JsonObject:
    """The header object, by the loader's rules (``safetensors/src/tensor.rs``, serde_json):
    UTF-8, JSON (whitespace before ``{`` is skipped, as serde does) nested at most
    :data:`MAX_DEPTH` deep, an object; ``__metadata__`` at most once and (if present and not
    null) mapping strings to strings; ``dtype``/``shape``/``data_offsets`` once per entry.
    Raises :class:`HeaderProblem`."""
    if not text.lstrip(JSON_SPACE).startswith(b"{"):
        raise HeaderProblem("ST002", "header does not start with '{' (the loader refuses it)")
    deep = too_deep(text, MAX_DEPTH)
    if deep is not None:
        raise HeaderProblem("ST010", f"header JSON nested deeper than {MAX_DEPTH} levels "
                            f"(at header byte {deep})")
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_object)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise HeaderProblem("ST002", f"header unreadable: {exc}") from exc
    if isinstance(header, dict) and (twice := _duplicate_field(header)) is not None:
        raise HeaderProblem("ST002", f"header unreadable: duplicate field `{twice}` (the "
                            "loader refuses it)")
    if not isinstance(header, dict):
        raise HeaderProblem("ST002", "header is not a JSON object")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(
            isinstance(v, str) for v in meta.values())):
        raise HeaderProblem("ST011", "__metadata__ is not a map of strings to strings")
    return header


def read_header(path: Path) -> tuple[int, dict[str, Any]] | None:
    """(N, parsed header) or None when the file does not parse as safetensors."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) < 8:
                return None
            (n,) = struct.unpack("<Q", raw)
            if n < 2 or n > MAX_HEADER:
                return None
            header = parse_header_text(fh.read(n))
    except (OSError, ValueError):
        return None
    return n, header


def _int(x: Any) -> int:
    """A JSON integer as serde reads a ``usize`` (bools and floats are refused)."""
    if isinstance(x, bool) or not isinstance(x, int) or x < 0 or x >= 1 << 64:
        raise ValueError(f"{x!r} is not an unsigned 64-bit integer")
    return x


class SafetensorsFormat:
    """A single safetensors file (``safetensors``)."""

    name: ClassVar[str] = "safetensors"
    priority: ClassVar[int] = 20

    @classmethod
    def detect(cls, path: Path) -> bool:
        raw = head_of(path, 9 + 64)
        if raw is None or len(raw) < 10:
            return False
        (n,) = struct.unpack_from("<Q", raw)
        body = raw[8:].lstrip(JSON_SPACE)
        return 2 <= n <= MAX_HEADER and body.startswith(b"{") and (
            body[1:2] in (b'"', b"}", b" ", b"\n"))

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        """The header (length, JSON grammar), each entry against its dtype and extent, the
        layout of the byte ranges, then the payloads scanned numerically (no checksums)."""
        spath = str(path)
        report = CheckpointReport(path=spath, format=cls.name, verdict=Verdict.INTACT,
                                  files=[spath])
        size = os.path.getsize(path)
        verdicts: list[Verdict] = []
        with open_evidence(path) as fh:
            read = _read_header(fh, report, size)
            if read is None:
                return report
            base, header = read
            meta = header.pop("__metadata__", None)
            if meta is not None:
                report.extra["metadata"] = meta
            entries = [e for name, entry in header.items()
                       if (e := _entry(report, name, entry, base)) is not None]
            entries.sort()
            verdicts += _layout(report, entries, base, size)
            _scan_payloads(fh, report, entries, base, size, options)
        tensormap.finalize(report, verdicts)
        return report

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        for rec in report.tensors:
            ok = rec.status in ("ok", "unverified", "suspect") and rec.offset is not None
            yield rec, None if ok else ("; ".join(rec.reasons) or rec.status)


FORMATS = [SafetensorsFormat]


def _read_header(fh: Any, report: CheckpointReport, size: int
                 ) -> tuple[int, dict[str, Any]] | None:
    """(where the data starts, the parsed header); None when the header cannot be read (the
    report says why)."""
    spath = report.path
    (n,) = struct.unpack("<Q", fh.read(8))
    if n > MAX_HEADER:
        report.findings.append(finding("ST001", f"header length {n} exceeds the "
                                       f"loader's limit of {MAX_HEADER} bytes",
                                       evidence=spath, offset=0, length=8))
        report.verdict = Verdict.DAMAGED if 8 + n <= size else Verdict.TRUNCATED
        return None
    if 8 + n > size:
        report.findings.append(finding("ST001", f"header length {n} runs past the end "
                                       f"of the {size}-byte file", evidence=spath,
                                       offset=0, length=8))
        report.verdict = Verdict.TRUNCATED
        return None
    try:
        header = parse_header_text(fh.read(n))
    except HeaderProblem as exc:
        report.findings.append(finding(exc.code, str(exc), evidence=spath, offset=8,
                                       length=n))
        report.verdict = Verdict.DAMAGED
        return None
    return 8 + n, header


def _damage(report: CheckpointReport, rec: TensorRecord, reason: str, code: str, title: str,
            **where: Any) -> None:
    rec.status = "damaged"
    rec.reasons.append(reason)
    report.findings.append(finding(code, title, evidence=report.path, tensors=[rec.name],
                                   **where))


def _entry(report: CheckpointReport, name: str, entry: Any, base: int
           ) -> tuple[int, int, str] | None:
    """One header entry as a tensor record (appended to the report): its dtype, shape and
    byte extent checked; (begin, end, name) of its bytes, None when the entry is malformed
    or its dtype unknown."""
    rec = TensorRecord(name=name, file=report.path)
    report.tensors.append(rec)
    try:
        code = entry["dtype"]
        if not isinstance(code, str):
            raise TypeError("dtype is not a string")
        shape = tuple(_int(x) for x in entry["shape"])
        begin, end = (_int(x) for x in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        _damage(report, rec, "malformed header entry", "ST003",
                f"{name}: malformed header entry")
        return None
    info = dtypes.BY_SAFETENSORS.get(code)
    rec.shape, rec.offset, rec.length = shape, base + begin, end - begin
    rec.dtype = info.name if info else code
    rec.storage = name
    numel = 1
    for s in shape:
        numel *= s
    if info is None and code not in dtypes.SAFETENSORS_SUBBYTE_BITS:
        _damage(report, rec, f"unknown dtype {code}", "ST003",
                f"{name}: unknown dtype {code!r}")
        return None
    bits = info.itemsize * 8 if info else dtypes.SAFETENSORS_SUBBYTE_BITS[code]
    if numel * bits % 8 or numel * bits // 8 != end - begin or begin > end \
            or begin < 0 or any(x < 0 for x in shape):
        _damage(report, rec, "shape x dtype differs from the byte extent", "ST004",
                f"{name}: shape {list(shape)} x {code} is {numel * bits / 8:g} bytes but "
                f"data_offsets span {end - begin}", offset=base + begin, length=end - begin)
    if code in dtypes.SAFETENSORS_UNLOADABLE:
        _damage(report, rec, f"dtype {code}: no loader understands it", "ST003",
                f"{name}: dtype {code!r} is in safetensors' header grammar but its loaders "
                "refuse it (Dtype not understood): the file does not load")
    return begin, end, name


def _layout(report: CheckpointReport, entries: list[tuple[int, int, str]], base: int,
            size: int) -> list[Verdict]:
    """The byte ranges in order: overlaps, gaps, a file shorter or longer than they need."""
    spath, verdicts = report.path, []
    cursor = 0
    for begin, end, name in entries:
        if begin < cursor:
            report.findings.append(finding("ST005", f"{name} overlaps the previous "
                                           "tensor", evidence=spath,
                                           offset=base + begin, tensors=[name]))
            verdicts.append(Verdict.DAMAGED)
        elif begin > cursor:
            report.findings.append(finding("ST006", f"{begin - cursor} unused bytes "
                                           f"before {name}", evidence=spath,
                                           offset=base + cursor, length=begin - cursor))
            verdicts.append(Verdict.DAMAGED)
        cursor = max(cursor, end)
    if base + cursor > size:
        report.findings.append(finding(
            "ST007", f"file is {size} bytes; the header needs {base + cursor}",
            evidence=spath, offset=size, length=base + cursor - size))
        verdicts.append(Verdict.TRUNCATED)
    elif base + cursor < size:
        report.findings.append(finding("ST008", f"{size - base - cursor} bytes after "
                                       "the last tensor", evidence=spath,
                                       offset=base + cursor))
        verdicts.append(Verdict.DAMAGED)
    return verdicts


def _scan_payloads(fh: Any, report: CheckpointReport, entries: list[tuple[int, int, str]],
                   base: int, size: int, options: ProbeOptions) -> None:
    """Each well-formed tensor's bytes: truncated past the end, else unverified and (with
    ``options.numeric``) scanned for numerical damage."""
    spath = report.path
    by_name = {r.name: r for r in report.tensors}
    storages: dict[str, tensormap.StorageCheck] = {}
    for begin, end, name in entries:
        rec = by_name[name]
        if rec.status != "ok":
            continue
        if base + end > size:
            rec.status = "truncated"
            rec.reasons.append(f"file ends {base + end - size} bytes before its end")
            continue
        rec.status = "unverified"
        if options.numeric and rec.dtype in dtypes.BY_NAME:
            sc = tensormap.StorageCheck(key=name, file=spath, data_offset=base + begin,
                                        dtype=rec.dtype, status="unverified")
            scan = numeric.StorageScan(rec.dtype, start=base + begin,
                                       length=end - begin, names=[name])
            zipwalk.crc_range(fh, base + begin, end - begin, on_chunk=scan.feed, crc=False)
            sc.summary = scan.finish()
            storages[name] = sc
    report.findings.append(finding("ST009", "safetensors stores no checksums: payloads "
                                   "verified numerically only", evidence=spath))
    if storages:
        report.findings.extend(tensormap.numeric_findings(storages, report.tensors, spath))
