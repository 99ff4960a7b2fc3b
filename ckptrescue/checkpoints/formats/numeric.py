"""Streaming numerical health of tensor bytes (pure: bytes in, statistics and findings out).

A :class:`StorageScan` is fed the chunks of one storage / tensor byte range as the CRC pass
reads them (so the file is read once; the scan reuses the CRC pass's buffer), with bounded
memory: exact counts (elements, NaN, Inf, exact zeros, subnormals, signs), a sampled exponent
histogram, the three largest finite magnitudes with their index (for exponent outliers), the
first non-finite elements and the all-zero 4 KiB pages aligned to the file (torn writes).
:func:`judge` turns a finished scan plus the tensor names into suspicions
(reference/checkpoint-formats.md §6):

* NaN/Inf counts (a few in an otherwise finite tensor: bit flip or torn write);
* exponent outliers far above the tensor's RMS, with a flip-back candidate ("bit 30 of element
  i; flipping it back gives 0.0123") when exactly one exponent bit returns the value to the bulk;
* 4 KiB-aligned zero pages in a tensor that otherwise has almost no exact zeros;
* invariants from names: Adam ``exp_avg_sq`` >= 0, BatchNorm ``running_var`` > 0,
  ``num_batches_tracked`` >= 0.

The cost per element does not depend on the values: each chunk goes through the same dozen
vectorised numpy operations whatever it holds (all-zero, NaN-heavy, integer-valued, subnormal
or trained weights alike); per-element Python work (examples, flip-back explanations, page
offsets) is bounded by fixed limits (:data:`EXAMPLES`, :data:`PAGES_KEPT`, three top
magnitudes per chunk) and the summary says how many it explains of how many it counts.

Needs numpy (a torch dependency); without it the scan is skipped and says so.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.checkpoints.formats import dtypes
from ckptrescue.model import JsonObject

PAGE = 4096
EXAMPLES = 8  # non-finite elements kept (with a flip-back explanation) per scanned range
PAGES_KEPT = 64  # zero-page offsets kept per scanned range (all of them are counted)
SAMPLE = 61  # the exponent histogram samples one element in SAMPLE of each chunk
INVARIANT_NAMES = {"exp_avg_sq", "running_var", "num_batches_tracked"}
# TensorFlow/Keras names of the same invariants (a part of the name, any case), judged by
# ``tf_findings.numeric_findings``: a BatchNorm moving variance is positive, an Adam second
# moment (its "velocity" slot) is not negative
TF_VARIANCE_PARTS = ("moving_variance", "running_var")
TF_SECOND_MOMENT_PARTS = ("velocity",)


def carries_sign_invariant(name: str) -> bool:
    """Whether the values of a tensor called ``name`` have a sign the judges check (a
    variance is positive, a second moment and a step count are not negative): its scan then
    counts signs, which no other tensor needs."""
    lower = name.lower()
    return name.rsplit(".", 1)[-1] in INVARIANT_NAMES or any(
        part in lower for part in (*TF_VARIANCE_PARTS, *TF_SECOND_MOMENT_PARTS))


@dataclass
class NumericSummary:
    """Statistics of one scanned byte range."""

    dtype: str
    count: int = 0
    nan: int = 0
    inf: int = 0
    zeros: int = 0  # exact zeros (+0.0 and -0.0 for floats)
    subnormals: int = 0
    negatives: int = 0
    nonpositive: int = 0
    rms_bulk: float | None = None
    zero_pages: list[int] = field(default_factory=list)  # first PAGES_KEPT zero-page offsets
    zero_page_count: int = 0  # every all-zero page of the range
    zeros_near_pages: int = 0  # exact zeros in the chunks holding zero pages (outside them)
    elements_near_pages: int = 0
    outliers: list[dict[str, Any]] = field(default_factory=list)
    nonfinite_examples: list[dict[str, Any]] = field(default_factory=list)  # first EXAMPLES
    skipped: str | None = None


def from_bits(bits: int, dtype: str) -> float:
    if dtype == "float32":
        return float(struct.unpack("<f", struct.pack("<I", bits))[0])
    if dtype == "float64":
        return float(struct.unpack("<d", struct.pack("<Q", bits))[0])
    if dtype == "float16":
        return float(struct.unpack("<e", struct.pack("<H", bits))[0])
    if dtype == "float8_e5m2":  # the top byte of an IEEE half
        return float(struct.unpack("<e", struct.pack("<H", (bits & 0xFF) << 8))[0])
    if dtype == "float8_e4m3fn":  # bias 7, no Inf, NaN only as S.1111.111
        sign = -1.0 if bits & 0x80 else 1.0
        e, m = (bits >> 3) & 0xF, bits & 0x7
        if e == 0xF and m == 0x7:
            return float("nan")
        return sign * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])


@dataclass(frozen=True)
class _FloatLayout:
    ucode: str  # unsigned view of one element
    shift: int  # exponent field position
    emask: int  # exponent field mask (all ones = Inf/NaN for IEEE types)
    sign: int  # sign bit position
    mant: int  # mantissa mask
    gap: int  # exponent steps above the reference that make an outlier
    special: int = -1  # smallest non-finite magnitude (default: exponent all ones)
    has_inf: bool = True  # False: every non-finite magnitude is a NaN

    @property
    def nonfinite(self) -> int:
        return self.special if self.special >= 0 else self.emask << self.shift


_LAYOUT = {
    "float32": _FloatLayout("u4", 23, 0xFF, 31, 0x7FFFFF, 8),
    "bfloat16": _FloatLayout("u2", 7, 0xFF, 15, 0x7F, 8),
    "float16": _FloatLayout("u2", 10, 0x1F, 15, 0x3FF, 4),
    "float64": _FloatLayout("u8", 52, 0x7FF, 63, (1 << 52) - 1, 8),
    # OCP FP8 (torch's names): E5M2 is IEEE-like; E4M3FN has no Inf and one NaN per sign
    "float8_e5m2": _FloatLayout("u1", 2, 0x1F, 7, 0x3, 4),
    "float8_e4m3fn": _FloatLayout("u1", 3, 0xF, 7, 0x7, 4, special=0x7F, has_inf=False),
}
_REF_RANK = 3  # outliers are judged against the 3rd-largest magnitude (1-2 flips stand out)
MIN_ELEMENTS = 16
_ROWS = 64  # a chunk's top magnitudes are found among the rows of its 3 largest column maxima


class StorageScan:
    """Accumulates statistics over consecutive chunks of one byte range.

    Floats are read as unsigned integers and every chunk costs the same fixed sequence of
    vectorised operations: the smallest and largest magnitude (sign cleared), from four
    read-only reductions (:func:`_magnitude_range`); exact counts of zeros and of values below
    the smallest normal (subnormals) when the minimum says there are any; NaN and Inf counts
    (all-ones exponent, mantissa zero or not) when the maximum says there are any; a histogram
    of the exponent field over one element in :data:`SAMPLE` (the bulk's lower bound); the
    sign counts when a name carries an invariant; and, when the chunk could hold one of the
    three largest finite magnitudes so far, its column maxima (a ``(64, n/64)`` view) to find
    them. The magnitudes themselves are written out only for a chunk that needs them.
    An outlier is a value whose exponent is at least ``gap`` steps (x256 for fp32/bf16/fp64,
    x16 for fp16) above the third-largest value's, and that one exponent-bit flip would bring
    back among the ordinary values (reference §6 heuristics 2-3). Only the two values above the
    third-largest can be outliers, so the follow-up per element is bounded.
    """

    def __init__(self, dtype: str, *, start: int, length: int, big_endian: bool = False,
                 names: list[str] | None = None) -> None:
        self.dtype = dtype
        # sign counts are only needed for tensors whose names carry an invariant
        self.invariants = names is None or any(carries_sign_invariant(n) for n in names)
        self.start = start
        self.end = start + length
        self.big_endian = big_endian
        self.summary = NumericSummary(dtype=dtype)
        info = dtypes.lookup(dtype)
        self.itemsize = info.itemsize if info else 1
        self.layout = _LAYOUT.get(dtype)
        self.kind = "float" if self.layout is not None else info.kind if info else "other"
        self._carry = b""
        self._page_ctx = [0, 0]  # exact zeros / elements around zero pages (same chunks)
        self._index = 0
        self._hist: Any = None
        self._top: list[tuple[int, int, int]] = []  # (magnitude bits, index, raw bits), desc
        self._np: Any = None
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - numpy ships with torch
            self.summary.skipped = "numpy not installed"
            return
        self._np = np
        if (self.kind == "float" and self.layout is None) or self.kind not in ("float", "int", "bool"):
            self.summary.skipped = f"no numeric checks for {dtype}"
        if self.layout is not None:
            self._hist = np.zeros(self.layout.emask + 1, dtype=np.int64)

    def feed(self, offset: int, data: bytes | memoryview) -> None:
        """Add the bytes at absolute ``offset`` (chunks must arrive in order)."""
        if self.summary.skipped:
            return
        buf = bytes(self._carry) + bytes(data) if self._carry else data
        usable = len(buf) - len(buf) % self.itemsize
        self._carry = bytes(buf[usable:])
        self._zero_seen = False
        if usable:
            self._values(memoryview(buf)[:usable])
        if self.kind == "float" and self._zero_seen:
            # a zero page is 4096 zero bytes: whole zero elements, so a chunk without any
            # zero magnitude has none and skips the page pass
            self._pages(offset, data)

    def _pages(self, offset: int, data: bytes | memoryview) -> None:
        """Find all-zero 4 KiB pages (file-aligned) fully inside the range.

        Fixed cost: the first 8 bytes of every page are compared at once; only the pages that
        start with zeros are compared in full, as one reduction. For a chunk with a zero page,
        the exact zeros elsewhere in the chunk are counted (a torn write leaves a zero page
        among non-zero values; a sparse tensor has zeros all around).
        """
        np = self._np
        lo = max(-(-offset // PAGE) * PAGE, -(-self.start // PAGE) * PAGE)
        hi = min(offset + len(data), self.end)
        if hi - lo < PAGE:
            return
        view = memoryview(data)
        npages = (hi - lo) // PAGE
        rel0 = lo - offset
        pages = np.frombuffer(view[rel0:rel0 + npages * PAGE], dtype=np.uint64
                              ).reshape(npages, PAGE // 8)
        cand = np.flatnonzero(pages[:, 0] == 0)
        if not cand.size:
            return
        if cand.size == npages:  # every page starts with zeros: no gather
            zero = np.flatnonzero(pages.max(axis=1) == 0)
        else:
            zero = cand[pages[cand].max(axis=1) == 0]
        found = int(zero.size)
        if not found:
            return
        s = self.summary
        room = PAGES_KEPT - len(s.zero_pages)
        if room > 0:
            s.zero_pages.extend((offset + rel0 + zero[:room] * PAGE).tolist())
        s.zero_page_count += found
        usable = len(view) - len(view) % self.itemsize
        per = self.itemsize if self.itemsize in (2, 4, 8) else 1
        in_pages = found * PAGE // per
        if found == npages and rel0 % per == 0:
            # the whole page span is zeros: only the elements before and after it can be
            # non-zero, so only they are counted (same result as counting the whole chunk)
            head = np.frombuffer(view[:rel0], dtype=f"u{per}")
            tail = np.frombuffer(view[rel0 + npages * PAGE:usable], dtype=f"u{per}")
            size = head.size + in_pages + tail.size
            zeros = int(head.size - np.count_nonzero(head) + tail.size - np.count_nonzero(tail))
        else:
            arr = np.frombuffer(view[:usable], dtype=f"u{per}")
            size = arr.size
            zeros = int(arr.size - np.count_nonzero(arr)) - in_pages
        self._page_ctx[0] += max(zeros, 0)
        self._page_ctx[1] += size - in_pages

    def _values(self, buf: memoryview) -> None:
        np = self._np
        s = self.summary
        order = ">" if self.big_endian else "<"
        lay = self.layout
        base = self._index
        if lay is None:  # integers and bools: invariant sign counts only
            info = dtypes.lookup(self.dtype)
            assert info is not None and info.numpy is not None
            code = info.numpy if info.numpy in ("?", "i1", "u1") else order + info.numpy
            arr = np.frombuffer(buf, dtype=code)
            self._index += arr.size
            s.count += arr.size
            if self.kind == "int" and self.invariants:
                s.negatives += int(np.count_nonzero(arr < 0)) if arr.dtype.kind == "i" else 0
                s.nonpositive += int(np.count_nonzero(arr <= 0))
            return
        u = np.frombuffer(buf, dtype=order + lay.ucode)
        if self.big_endian:
            u = u.astype(lay.ucode)  # native order once: every operation below is on it
        n = u.size
        self._index += n
        s.count += n
        inf_bits = lay.nonfinite
        # every temporary goes to this thread's scratch arrays: a fresh 1 MiB array per
        # operation would be a fresh mapping, paid in page faults (~3 ns/element). The chunk,
        # the magnitude and one mask are all there is (2.25 MiB for a 1 MiB chunk of float32:
        # about one core's L2); each mask is counted before the next comparison reuses it
        mag, mask = _scratch(np, u.dtype, n)
        low, peak = _magnitude_range(u, lay.sign)
        have_mag = False  # ``mag`` (sign cleared) is written only for a chunk that needs it
        nonfinite = peak >= inf_bits  # NaN / Inf present
        if low < 1 << lay.shift or nonfinite:  # a zero, subnormal, NaN or Inf: count them
            np.bitwise_and(u, (1 << lay.sign) - 1, out=mag)
            have_mag = True
            nonzero = int(np.count_nonzero(mag))
            s.zeros += n - nonzero
            self._zero_seen = nonzero < n
            tiny = int(np.count_nonzero(np.less(mag, 1 << lay.shift, out=mask)))
            s.subnormals += tiny - (n - nonzero)
        if self.invariants:
            signed = u.view(f"i{u.itemsize}")
            # sign set, not -0.0; then sign set, or +0.0
            s.negatives += int(np.count_nonzero(np.greater(u, 1 << lay.sign, out=mask)))
            s.nonpositive += int(np.count_nonzero(np.less_equal(signed, 0, out=mask)))
        # exponent histogram of one element in SAMPLE of each chunk (an exact bincount costs
        # more than all the other operations of the chunk together)
        sample = (u[::SAMPLE] >> lay.shift) & lay.emask
        self._hist += np.bincount(sample if lay.ucode != "u8" else sample.astype(np.intp),
                                  minlength=lay.emask + 1)
        finite0 = 0  # the key of +0.0 (key = magnitude while every value is finite)
        if nonfinite:
            bad = int(np.count_nonzero(np.greater_equal(mag, inf_bits, out=mask)))
            room = EXAMPLES - len(s.nonfinite_examples)
            if room > 0:
                for i in np.flatnonzero(mask)[:room].tolist():
                    raw = int(u[i])
                    s.nonfinite_examples.append({"index": base + i,
                                                 "value": str(from_bits(raw, self.dtype)),
                                                 "_raw": raw})
            nans = int(np.count_nonzero(np.greater(mag, inf_bits, out=mask))) \
                if lay.has_inf else bad
            s.nan += nans
            s.inf += bad - nans
            # key = magnitude - Inf's bits, wrapping, in place: finite values keep their
            # order above every NaN/Inf (whose keys wrap to the bottom): no mask ranks them
            finite0 = (1 << lay.sign + 1) - inf_bits
            np.subtract(mag, inf_bits, out=mag, casting="unsafe")
            peak = int(mag.max()) - finite0
        if peak < 0:
            return  # nothing finite in this chunk
        if len(self._top) < _REF_RANK or peak > self._top[-1][0]:
            if not have_mag:
                np.bitwise_and(u, (1 << lay.sign) - 1, out=mag)
            self._top_three(mag, u, base, finite0)

    def _top_three(self, key: Any, u: Any, base: int, finite0: int) -> None:
        """Merge the chunk's three largest finite magnitudes into the running top three.

        ``key`` ranks the finite magnitudes above the non-finite values (``key - finite0`` is
        the magnitude). The three largest keys of a chunk lie in the columns of its three
        largest column maxima (a ``(64, n/64)`` view): a fixed cost, whatever the values."""
        np = self._np
        n = key.size
        if n <= 4 * _ROWS * _REF_RANK:
            cand = np.arange(n)
        else:
            cols = n // _ROWS
            m = cols * _ROWS
            colmax = key[:m].reshape(_ROWS, cols).max(axis=0)
            best = np.argpartition(colmax, cols - _REF_RANK)[cols - _REF_RANK:]
            cand = (np.arange(_ROWS)[:, None] * cols + best[None, :]).ravel()
            if m < n:
                cand = np.concatenate([cand, np.arange(m, n)])
        vals = key[cand]
        if vals.size > _REF_RANK:
            keep = np.argpartition(vals, vals.size - _REF_RANK)[vals.size - _REF_RANK:]
            cand, vals = cand[keep], vals[keep]
        items = [(v - finite0, base + j, int(u[j]))
                 for v, j in zip(vals.tolist(), cand.tolist(), strict=True) if v >= finite0]
        merged = sorted(self._top + items, key=lambda t: (-t[0], t[1]))
        self._top = merged[:_REF_RANK]

    def merge(self, later: StorageScan) -> None:
        """Append the scan of the part of the range that follows this one (scanned apart,
        e.g. on another thread; it starts where this one ends, on an element boundary)."""
        s, o = self.summary, later.summary
        if s.skipped or o.skipped:
            s.skipped = s.skipped or o.skipped
            return
        shift = self._index  # element index of the later part's first element
        for name in ("count", "nan", "inf", "zeros", "subnormals", "negatives", "nonpositive",
                     "zero_page_count"):
            setattr(s, name, getattr(s, name) + getattr(o, name))
        s.zero_pages.extend(o.zero_pages[:max(0, PAGES_KEPT - len(s.zero_pages))])
        for ex in o.nonfinite_examples[:max(0, EXAMPLES - len(s.nonfinite_examples))]:
            s.nonfinite_examples.append({**ex, "index": ex["index"] + shift})
        self._page_ctx = [a + b for a, b in zip(self._page_ctx, later._page_ctx, strict=True)]
        if self._hist is not None:
            self._hist += later._hist
        moved = [(m, i + shift, r) for m, i, r in later._top]
        self._top = sorted(self._top + moved, key=lambda t: (-t[0], t[1]))[:_REF_RANK]
        self._index += later._index
        self.end = later.end
        self._carry = later._carry

    def wire(self) -> JsonObject:
        """The scan's state as JSON-able values (carried from a forked reader to its parent,
        :mod:`forked_reads`); :meth:`unwire` restores it into a scan of the same range."""
        s = self.summary
        return {"summary": {k: getattr(s, k) for k in _WIRED},
                "carry": bytes(self._carry).hex(), "page_ctx": list(self._page_ctx),
                "index": self._index, "end": self.end,
                "hist": None if self._hist is None else self._hist.tolist(),
                "top": [list(t) for t in self._top]}

    def unwire(self, state: JsonObject) -> None:
        """Take the state :meth:`wire` gave (of a scan made for the same range and dtype);
        a malformed state raises ValueError, TypeError or KeyError and changes nothing."""
        summary = state["summary"]
        values = {k: summary[k] for k in _WIRED}
        if not all(isinstance(values[k], int) for k in _WIRED_INTS) or \
                not isinstance(values["zero_pages"], list) or \
                not isinstance(values["nonfinite_examples"], list) or \
                not (values["skipped"] is None or isinstance(values["skipped"], str)):
            raise TypeError("malformed scan state")
        hist = state["hist"]
        if (hist is None) != (self._hist is None) or \
                (hist is not None and len(hist) != self._hist.size):
            raise ValueError("scan state of another dtype")
        top = [(int(m), int(i), int(r)) for m, i, r in state["top"]]
        page_ctx = [int(v) for v in state["page_ctx"]]
        carry = bytes.fromhex(state["carry"])
        index, end = int(state["index"]), int(state["end"])
        for k, v in values.items():
            setattr(self.summary, k, v)
        if hist is not None:
            self._hist[:] = hist
        self._top, self._page_ctx, self._carry = top, page_ctx, carry
        self._index, self.end = index, end

    def finish(self) -> NumericSummary:
        """Close the scan: reference magnitude, outliers with flip-backs, non-finite flips."""
        s = self.summary
        s.zeros_near_pages, s.elements_near_pages = self._page_ctx
        lay = self.layout
        if s.skipped or lay is None or self._hist is None:
            return s
        hist = self._hist
        top = sorted(self._top, reverse=True)
        finite = s.count - s.nan - s.inf
        if finite < MIN_ELEMENTS or len(top) < _REF_RANK:
            self._nonfinite_flips(None, None)
            return s
        np = self._np
        # reference: the _REF_RANK-th largest magnitude; lower bulk bound: the sample's 1st
        # percentile of normal values (or 40 binades below the reference)
        ref_e = top[_REF_RANK - 1][0] >> lay.shift
        normal = hist[1: lay.emask]
        n_normal = int(normal.sum())
        if n_normal:
            low_e = 1 + int(np.searchsorted(normal.cumsum(), max(1, n_normal // 100)))
        else:
            low_e = max(1, ref_e - 40)
        low_e = min(low_e, ref_e)
        s.rms_bulk = from_bits(ref_e << lay.shift, self.dtype)  # reference magnitude
        exp_bits = range(lay.shift + _exp_width(lay) - 1, lay.shift - 1, -1)
        for mag, index, raw in top:
            e = mag >> lay.shift
            if e < ref_e + lay.gap:  # (the top three are finite by construction)
                continue
            entry: dict[str, Any] = {"index": index, "value": from_bits(raw, self.dtype),
                                     "byte_offset": self.start + index * self.itemsize,
                                     "exponent_above_reference": e - ref_e}
            flip = self._flip(raw, exp_bits, low_e, ref_e)
            if flip is not None:
                entry["flip_bit"], entry["repaired"] = flip
            elif e < ref_e + 2 * lay.gap:
                continue  # large but no single exponent bit explains it: plausible
            s.outliers.append(entry)
        self._nonfinite_flips(low_e, ref_e)
        return s

    def _nonfinite_flips(self, low_e: int | None, ref_e: int | None) -> None:
        lay = self.layout
        assert lay is not None
        exp_bits = range(lay.shift + _exp_width(lay) - 1, lay.shift - 1, -1)
        for ex in self.summary.nonfinite_examples:
            ex["byte_offset"] = self.start + ex["index"] * self.itemsize
            raw = ex.pop("_raw", None)
            if raw is not None and low_e is not None and ref_e is not None:
                flip = self._flip(raw, exp_bits, low_e, ref_e)
                if flip is not None:
                    ex["flip_bit"], ex["repaired"] = flip

    def _flip(self, raw: int, exp_bits: range, low_e: int, ref_e: int,
              ) -> tuple[int, float] | None:
        """The one exponent bit whose flip puts the value among the ordinary ones, if unique."""
        lay = self.layout
        assert lay is not None
        hits = []
        for b in exp_bits:
            y = raw ^ (1 << b)
            e = (y >> lay.shift) & lay.emask
            if low_e <= e <= ref_e or (y & ((1 << lay.sign) - 1)) == 0:
                hits.append((b, from_bits(y, self.dtype)))
        return hits[0] if len(hits) == 1 else None


_WIRED_INTS = ("count", "nan", "inf", "zeros", "subnormals", "negatives", "nonpositive",
               "zero_page_count")
_WIRED = (*_WIRED_INTS, "zero_pages", "nonfinite_examples", "skipped")

_SCRATCH = threading.local()


def _magnitude_range(u: Any, sign: int) -> tuple[int, int]:
    """The smallest and largest magnitude (sign bit cleared) of the elements ``u``, from four
    read-only reductions: the unsigned and the signed view order each sign's magnitudes, so no
    magnitude array is written (writing one cost more than the four reductions together).

    With the sign bit at ``sign``: an element with the sign clear is its magnitude, the same
    in both views; one with the sign set is ``2**sign + magnitude`` unsigned and
    ``magnitude - 2**sign`` signed. So the largest positive is the signed maximum (when not
    negative), the largest negative magnitude the unsigned maximum less ``2**sign``, the
    smallest positive the unsigned minimum (when below ``2**sign``) and the smallest negative
    magnitude the signed minimum plus ``2**sign`` (when negative)."""
    top = 1 << sign
    signed = u.view(f"i{u.itemsize}")
    umin, umax = int(u.min()), int(u.max())
    smin, smax = int(signed.min()), int(signed.max())
    lows = [m for m, has in ((umin, umin < top), (smin + top, smin < 0)) if has]
    peaks = [m for m, has in ((smax, smax >= 0), (umax - top, umax >= top)) if has]
    return min(lows), max(peaks)


def _scratch(np: Any, dtype: Any, n: int) -> tuple[Any, Any]:
    """This thread's scratch arrays for one chunk of ``n`` elements: the magnitude (of
    ``dtype``) and a mask, reused from chunk to chunk (grown when a chunk is larger)."""
    have = getattr(_SCRATCH, "arrays", {})
    arrays = have.get(dtype.str)
    if arrays is None or arrays[0].size < n:
        size = max(n, 1 << 18)
        arrays = (np.empty(size, dtype), np.empty(size, bool))
        have[dtype.str] = arrays
        _SCRATCH.arrays = have
    return arrays[0][:n], arrays[1][:n]


def _exp_width(lay: _FloatLayout) -> int:
    return lay.emask.bit_length()


@dataclass
class Suspicion:
    """A numeric reason to distrust a tensor."""

    code: str
    title: str
    offset: int | None
    length: int | None
    details: JsonObject


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
            None, {"nan": s.nan, "inf": s.inf, "examples": s.nonfinite_examples,
                   "examples_limit": EXAMPLES}))
    for o in s.outliers:
        msg = f"exponent outlier {o['value']:.4g} at element {o['index']} of {label}"
        if "flip_bit" in o:
            msg += f" (probable flip of bit {o['flip_bit']}; flipped back: {o['repaired']:.6g})"
        out.append(Suspicion("NM002", msg, o["byte_offset"], dtypes.BY_NAME[s.dtype].itemsize,
                             {**o, "rms_bulk": s.rms_bulk}))
    if s.zero_page_count and s.elements_near_pages > 0 and \
            s.zeros_near_pages <= s.elements_near_pages * 0.01:
        out.append(Suspicion(
            "NM003", f"{s.zero_page_count} zero-filled 4 KiB page(s) in {label} "
            "(torn write?)", s.zero_pages[0], s.zero_page_count * PAGE,
            {"pages": s.zero_pages[:PAGES_KEPT], "pages_limit": PAGES_KEPT}))
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
