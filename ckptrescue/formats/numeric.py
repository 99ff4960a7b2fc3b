"""Streaming numerical health of tensor bytes (pure: bytes in, statistics and findings out).

A :class:`StorageScan` is fed the chunks of one storage / tensor byte range as the CRC pass
reads them (so the file is read once), with bounded memory: counts, a running sum of squares,
the few largest magnitudes (for exponent outliers), the first non-finite elements and the
all-zero 4 KiB pages aligned to the file (torn writes). :func:`judge` turns a finished scan plus
the tensor names into suspicions (reference/checkpoint-formats.md §6):

* NaN/Inf counts (a few in an otherwise finite tensor: bit flip or torn write);
* exponent outliers far above the tensor's RMS, with a flip-back candidate ("bit 30 of element
  i; flipping it back gives 0.0123") when exactly one exponent bit returns the value to the bulk;
* 4 KiB-aligned zero pages in a tensor that otherwise has almost no exact zeros;
* invariants from names: Adam ``exp_avg_sq`` >= 0, BatchNorm ``running_var`` > 0,
  ``num_batches_tracked`` >= 0.

Needs numpy (a torch dependency); without it the scan is skipped and says so.
"""

from __future__ import annotations

import heapq
import math
import struct
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.formats import dtypes

PAGE = 4096
_ZERO_PAGE = bytes(PAGE)
_TOPK = 8
# (bits, exponent-bit range high..low, absolute "impossible" magnitude)
_FLOAT_BITS = {"float32": (32, range(30, 22, -1), 1e30), "float64": (64, range(62, 51, -1), 1e100),
               "float16": (16, range(14, 9, -1), None), "bfloat16": (16, range(14, 6, -1), 1e30)}
_RATIO = {"float16": 1e3}
INVARIANT_NAMES = {"exp_avg_sq", "running_var", "num_batches_tracked"}
_DEFAULT_RATIO = 1e4


@dataclass
class NumericSummary:
    """Statistics of one scanned byte range."""

    dtype: str
    count: int = 0
    nan: int = 0
    inf: int = 0
    zeros: int = 0
    negatives: int = 0
    nonpositive: int = 0
    rms_bulk: float | None = None
    zero_pages: list[int] = field(default_factory=list)  # absolute offsets of all-zero pages
    zeros_near_pages: int = 0  # exact zeros in the chunks holding zero pages (outside them)
    elements_near_pages: int = 0
    outliers: list[dict[str, Any]] = field(default_factory=list)
    nonfinite_examples: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None


def _to_bits(value: float, dtype: str) -> int:
    if dtype == "float32":
        return int(struct.unpack("<I", struct.pack("<f", value))[0])
    if dtype == "float64":
        return int(struct.unpack("<Q", struct.pack("<d", value))[0])
    if dtype == "float16":
        return int(struct.unpack("<H", struct.pack("<e", value))[0])
    return int(struct.unpack("<I", struct.pack("<f", value))[0]) >> 16  # bfloat16


def _from_bits(bits: int, dtype: str) -> float:
    if dtype == "float32":
        return float(struct.unpack("<f", struct.pack("<I", bits))[0])
    if dtype == "float64":
        return float(struct.unpack("<d", struct.pack("<Q", bits))[0])
    if dtype == "float16":
        return float(struct.unpack("<e", struct.pack("<H", bits))[0])
    return float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])


class StorageScan:
    """Accumulates statistics over consecutive chunks of one byte range."""

    def __init__(self, dtype: str, *, start: int, length: int, big_endian: bool = False,
                 names: list[str] | None = None) -> None:
        self.dtype = dtype
        # sign counts are only needed for tensors whose names carry an invariant
        self.invariants = names is None or any(
            n.rsplit(".", 1)[-1] in INVARIANT_NAMES for n in names)
        self.start = start
        self.end = start + length
        self.big_endian = big_endian
        self.summary = NumericSummary(dtype=dtype)
        info = dtypes.lookup(dtype)
        self.itemsize = info.itemsize if info else 1
        self.kind = info.kind if info else "other"
        self._carry = b""
        self._page_ctx = [0, 0]  # exact zeros / elements around zero pages (same chunks)
        self._index = 0
        self._sumsq = 0.0
        self._top: list[tuple[float, int, float]] = []  # (abs, index, value) min-heap
        self._np: Any = None
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - numpy ships with torch
            self.summary.skipped = "numpy not installed"
            return
        self._np = np
        if self.kind not in ("float", "int", "bool") or (
                info is not None and info.numpy is None and dtype != "bfloat16"):
            self.summary.skipped = f"no numeric checks for {dtype}"

    def feed(self, offset: int, data: bytes | memoryview) -> None:
        """Add the bytes at absolute ``offset`` (chunks must arrive in order)."""
        if self.summary.skipped:
            return
        buf = bytes(self._carry) + bytes(data) if self._carry else data
        usable = len(buf) - len(buf) % self.itemsize
        self._carry = bytes(buf[usable:])
        if usable:
            self._values(memoryview(buf)[:usable])
        if self.kind == "float":
            self._pages(offset, data)

    def _pages(self, offset: int, data: bytes | memoryview) -> None:
        """Find all-zero 4 KiB pages (file-aligned) fully inside the range.

        Cheap: only pages whose first 8 bytes are zero are compared in full. For a chunk with a
        zero page, the exact zeros elsewhere in the chunk are counted (a torn write leaves a
        zero page among non-zero values; a sparse tensor has zeros all around).
        """
        np = self._np
        lo = max(-(-offset // PAGE) * PAGE, -(-self.start // PAGE) * PAGE)
        hi = min(offset + len(data), self.end)
        if hi - lo < PAGE:
            return
        view = memoryview(data)
        npages = (hi - lo) // PAGE
        rel0 = lo - offset
        heads = np.frombuffer(view[rel0:rel0 + npages * PAGE], dtype=np.uint64)[::PAGE // 8]
        found = 0
        for i in np.flatnonzero(heads == 0):
            rel = rel0 + int(i) * PAGE
            if view[rel:rel + PAGE] == _ZERO_PAGE:
                self.summary.zero_pages.append(offset + rel)
                found += 1
        if found:
            usable = len(view) - len(view) % self.itemsize
            if self.dtype == "bfloat16" or self.itemsize not in (2, 4, 8):
                arr = np.frombuffer(view[:usable], dtype=np.uint8)
                per = 1
            else:
                arr = np.frombuffer(view[:usable], dtype=f"u{self.itemsize}")
                per = self.itemsize
            zeros = int(arr.size - np.count_nonzero(arr)) - found * PAGE // per
            self._page_ctx[0] += max(zeros, 0)
            self._page_ctx[1] += arr.size - found * PAGE // per

    def _values(self, buf: memoryview) -> int:  # noqa: C901
        """Update the statistics; returns the number of exact zeros in this chunk."""
        np = self._np
        s = self.summary
        order = ">" if self.big_endian else "<"
        if self.dtype == "bfloat16":
            raw = np.frombuffer(buf, dtype=order + "u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            info = dtypes.lookup(self.dtype)
            assert info is not None and info.numpy is not None
            code = info.numpy if info.numpy in ("?", "i1", "u1") else order + info.numpy
            arr = np.frombuffer(buf, dtype=code)
        n = arr.size
        base = self._index
        self._index += n
        s.count += n
        if self.kind != "float":
            if self.kind == "int" and self.invariants:
                s.negatives += int(np.count_nonzero(arr < 0)) if arr.dtype.kind == "i" else 0
                s.nonpositive += int(np.count_nonzero(arr <= 0))
            return 0
        work = arr.astype(np.float32) if arr.dtype == np.float16 else arr
        with np.errstate(all="ignore"):
            sumsq = float(np.dot(work, work))
        idx_map = None
        vals = work
        if not math.isfinite(sumsq):  # NaN/Inf present, or huge finite values: slow path
            finite = np.isfinite(work)
            nbad = n - int(np.count_nonzero(finite))
            if nbad:
                nans = int(np.count_nonzero(np.isnan(work)))
                s.nan += nans
                s.inf += nbad - nans
                if len(s.nonfinite_examples) < 8:
                    ubits = arr.view(f"u{arr.dtype.itemsize}")
                    shift = 16 if self.dtype == "bfloat16" else 0
                    for i in np.flatnonzero(~finite)[: 8 - len(s.nonfinite_examples)]:
                        s.nonfinite_examples.append({"index": base + int(i),
                                                     "value": str(float(work[i])),
                                                     "_raw": int(ubits[i]) >> shift})
                idx_map = np.flatnonzero(finite)
                vals = work[finite]
            wide = vals.astype(np.float64)
            sumsq = float(np.dot(wide, wide))
        self._sumsq += sumsq
        if self.invariants:
            s.negatives += int(np.count_nonzero(vals < 0))
            s.nonpositive += int(np.count_nonzero(vals <= 0))
        zeros = 0
        if not vals.size:
            return zeros
        peak = max(abs(float(vals.max())), abs(float(vals.min())))
        floor = self._top[0][0] if len(self._top) >= _TOPK else -1.0
        if peak <= floor:
            return zeros
        mags = np.abs(vals)
        if floor >= 0:
            cand = np.flatnonzero(mags > floor)
            if cand.size > _TOPK:
                cand = cand[np.argpartition(mags[cand], cand.size - _TOPK)[cand.size - _TOPK:]]
        elif mags.size > _TOPK:
            cand = np.argpartition(mags, mags.size - _TOPK)[mags.size - _TOPK:]
        else:
            cand = np.arange(mags.size)
        for j in cand:
            m = float(mags[j])
            index = base + int(idx_map[j] if idx_map is not None else j)
            item = (m, index, float(vals[j]))
            if len(self._top) < _TOPK:
                heapq.heappush(self._top, item)
            elif m > self._top[0][0]:
                heapq.heapreplace(self._top, item)
        return zeros

    def finish(self) -> NumericSummary:
        """Close the scan: bulk RMS without the largest values, outliers with flip-backs."""
        s = self.summary
        if s.skipped or self.kind != "float":
            return s
        s.zeros_near_pages, s.elements_near_pages = self._page_ctx
        finite = s.count - s.nan - s.inf
        top = sorted(self._top, reverse=True)
        rest = finite - len(top)
        if rest > 0:
            sumsq = self._sumsq - sum(m * m for m, _, _ in top)
            s.rms_bulk = math.sqrt(max(sumsq, 0.0) / rest)
        _bits, exp_bits, absurd = _FLOAT_BITS.get(self.dtype, (0, range(0), None))
        ratio = _RATIO.get(self.dtype, _DEFAULT_RATIO)
        for mag, index, value in top:
            big_vs_bulk = s.rms_bulk is not None and s.rms_bulk > 0 and rest >= 16 \
                and mag > ratio * s.rms_bulk
            if not (big_vs_bulk or (absurd is not None and mag > absurd)):
                continue
            entry: dict[str, Any] = {"index": index, "value": value,
                                     "byte_offset": self.start + index * self.itemsize}
            flip = self._flip_back(value, exp_bits)
            if flip is not None:
                entry["flip_bit"], entry["repaired"] = flip
            elif not (absurd is not None and mag > absurd):
                continue  # large but plausible: no single exponent bit explains it
            s.outliers.append(entry)
        for ex in s.nonfinite_examples:
            ex["byte_offset"] = self.start + ex["index"] * self.itemsize
            raw = ex.pop("_raw", None)
            if raw is not None:
                flip = self._flip_back_bits(raw, exp_bits)
                if flip is not None:
                    ex["flip_bit"], ex["repaired"] = flip
        return s

    def _bulk_ok(self, y: float) -> bool:
        """True when ``y`` looks like the tensor's ordinary values (not just tiny)."""
        s = self.summary
        if not math.isfinite(y):
            return False
        scale = s.rms_bulk if s.rms_bulk else 1.0
        return y == 0.0 or scale * 1e-4 <= abs(y) <= 8 * scale

    def _flip_back(self, value: float, exp_bits: range) -> tuple[int, float] | None:
        return self._flip_back_bits(_to_bits(value, self.dtype), exp_bits)

    def _flip_back_bits(self, raw: int, exp_bits: range) -> tuple[int, float] | None:
        hits = []
        for b in exp_bits:
            y = _from_bits(raw ^ (1 << b), self.dtype)
            if self._bulk_ok(y):
                hits.append((b, y))
        return hits[0] if len(hits) == 1 else None


@dataclass
class Suspicion:
    """A numeric reason to distrust a tensor."""

    code: str
    title: str
    offset: int | None
    length: int | None
    details: dict[str, Any]


def judge(summary: NumericSummary, names: list[str]) -> list[Suspicion]:
    """Suspicions for one scanned range used by ``names`` (codes NM001-NM006)."""
    out: list[Suspicion] = []
    s = summary
    if s.skipped or s.count == 0:
        return out
    label = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
    if s.nan or s.inf:
        few = (s.nan + s.inf) <= max(4, s.count // 10_000)
        out.append(Suspicion(
            "NM001", f"{s.nan} NaN and {s.inf} Inf values in {label}"
            + (" (a few in an otherwise finite tensor: bit flip or torn write)" if few else ""),
            s.nonfinite_examples[0]["byte_offset"] if s.nonfinite_examples else None,
            None, {"nan": s.nan, "inf": s.inf, "examples": s.nonfinite_examples}))
    for o in s.outliers:
        msg = f"exponent outlier {o['value']:.4g} at element {o['index']} of {label}"
        if "flip_bit" in o:
            msg += f" (probable flip of bit {o['flip_bit']}; flipped back: {o['repaired']:.6g})"
        out.append(Suspicion("NM002", msg, o["byte_offset"], dtypes.BY_NAME[s.dtype].itemsize,
                             {**o, "rms_bulk": s.rms_bulk}))
    if s.zero_pages and s.elements_near_pages > 0 and \
            s.zeros_near_pages <= s.elements_near_pages * 0.01:
        out.append(Suspicion(
            "NM003", f"{len(s.zero_pages)} zero-filled 4 KiB page(s) in {label} "
            "(torn write?)", s.zero_pages[0], len(s.zero_pages) * PAGE,
            {"pages": s.zero_pages[:64]}))
    lower = [n.rsplit(".", 1)[-1] for n in names]
    if any(n == "exp_avg_sq" for n in lower) and s.negatives:
        out.append(Suspicion("NM004", f"{s.negatives} negative values in Adam exp_avg_sq "
                             f"{label}", None, None, {"negatives": s.negatives}))
    if any(n == "running_var" for n in lower) and s.nonpositive:
        out.append(Suspicion("NM005", f"{s.nonpositive} values <= 0 in BatchNorm running_var "
                             f"{label}", None, None, {"nonpositive": s.nonpositive}))
    if any(n == "num_batches_tracked" for n in lower) and s.negatives:
        out.append(Suspicion("NM006", f"negative num_batches_tracked in {label}", None, None,
                             {"negatives": s.negatives}))
    return out
