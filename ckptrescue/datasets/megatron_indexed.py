"""Megatron-LM / megatron-core indexed datasets: the ``.idx`` index against its ``.bin`` data.

Layout, as megatron-core 0.16.1 writes and reads it (``megatron/core/datasets/indexed_dataset.py``:
``_IndexWriter.__enter__``/``write`` and ``_IndexReader.__init__``), all little endian::

    b"MMIDIDX\\x00\\x00"          9 bytes, the header (_INDEX_HEADER)
    uint64 version              1
    uint8  dtype code           DType: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
                                6 float64, 7 float32, 8 uint16
    uint64 sequence_count       n
    uint64 document_count       d (= documents + 1: document_indices starts with 0)
    int32  sequence_lengths[n]  tokens per sequence
    int64  sequence_pointers[n] byte offset of each sequence in the .bin
    int64  document_indices[d]  sequence index where each document ends (first 0, last n)
    int8   sequence_modes[n]    only in multimodal datasets

The ``.bin`` is the token arrays back to back, no header and no checksum: sequence ``i`` is
``sequence_lengths[i] * itemsize`` bytes at ``sequence_pointers[i]``. ``_sequence_pointers``
makes the pointers contiguous from 0, so the ``.bin`` is exactly as long as the last pointer
plus the last sequence. A flipped byte inside the token data cannot be seen here (use a
manifest). The index is read in bounded chunks (:data:`CHUNK` entries), never whole.

A bad record's ``index`` is the sequence (or document) number, ``offset`` the byte offset in the
file named by ``key`` (the ``.idx`` for a damaged entry, the ``.bin`` for data that is missing).
"""

from __future__ import annotations

import os
import struct
from typing import IO, Any

from ckptrescue.datasets.format_heads import MEGATRON_MAGIC as MAGIC
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, open_tracked, read_exact

HEADER_SIZE = 34  # 9 magic + 8 version + 1 dtype code + 8 sequence count + 8 document count
ITEMSIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}  # DType code -> bytes per token
DTYPE_NAME = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64",
              7: "float32", 8: "uint16"}
CHUNK = 1 << 16  # sequences per read: 64 Ki x 12 bytes = 768 KiB of index at a time
MAX_BAD = 1000  # bad records listed per file; the rest are summarised


def partner_paths(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(idx, bin) for a prefix or either file (``get_idx_path``/``get_bin_path``)."""
    p = os.fspath(path)
    prefix = p[:-4] if p.endswith((".idx", ".bin")) else p
    return prefix + ".idx", prefix + ".bin"


def check_path(path: str | os.PathLike[str]) -> CheckOutcome:
    """Check the pair of a prefix, ``.idx`` or ``.bin`` path; a missing partner is named."""
    idx_path, bin_path = partner_paths(path)
    out = CheckOutcome()
    have_idx, have_bin = os.path.isfile(idx_path), os.path.isfile(bin_path)
    if not have_idx:
        out.bad.append(BadRecord(None, None, os.path.basename(idx_path),
                                 f"index {os.path.basename(idx_path)} is missing: the data file "
                                 f"{os.path.basename(bin_path)} cannot be read without it"))
        return out
    bin_size = os.stat(bin_path).st_size if have_bin else None
    with open_tracked(idx_path) as fh:
        return check(fh, os.stat(idx_path).st_size, out, bin_size=bin_size,
                     bin_name=os.path.basename(bin_path))


def check(fh: IO[bytes], size: int | None, out: CheckOutcome | None = None, *,
          bin_size: int | None = None, bin_name: str | None = None) -> CheckOutcome:
    """Check the index in ``fh`` (``size`` bytes); against the ``.bin`` when ``bin_size`` is
    given, else the missing ``.bin`` (``bin_name``) is reported."""
    out = CheckOutcome() if out is None else out
    bin_key = bin_name or ".bin"
    idx_key = (bin_name[:-4] + ".idx") if bin_name and bin_name.endswith(".bin") else ".idx"
    if size is None:  # a decompressed stream: the layout needs the length; measure it
        raise ValueError("megatron index check needs a seekable file of known size")
    head = read_exact(fh, HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        out.bad.append(BadRecord(None, 0, idx_key, f"index header truncated: {len(head)} of "
                                 f"{HEADER_SIZE} bytes"))
        return out
    if head[:9] != MAGIC:
        out.bad.append(BadRecord(None, 0, idx_key, f"index magic is {head[:9]!r}, not "
                                 f"{MAGIC!r} (megatron-core asserts 'bad header')"))
        return out
    version, code, n, d = struct.unpack_from("<QBQQ", head, 9)
    if version != 1:
        out.bad.append(BadRecord(None, 9, idx_key, f"index version {version}, not 1 "
                                 "(megatron-core asserts 'bad version')"))
        return out
    if code not in ITEMSIZE:
        out.bad.append(BadRecord(None, 17, idx_key, f"dtype code {code} is not a megatron "
                                 "DType (1..8)"))
        return out
    itemsize = ITEMSIZE[code]
    stored_d = d
    n, d, _multimodal = _layout(fh, size, n, d, out, idx_key)
    if n is None or d is None:
        return out
    ctx = _Ctx(fh, size, out, itemsize, bin_size, bin_key, idx_key)
    ctx.sequences(n)
    ctx.documents(n, d, whole=d >= stored_d or bool(out.bad and out.bad[0].offset == 26))
    if bin_size is None:
        out.bad.append(BadRecord(None, None, bin_key, f"data file {bin_key} is missing: "
                                 f"all {n} sequences are lost"))
    out.records = max(0, n - ctx.bad_sequences) if bin_size is not None else 0
    return out


def _layout(fh: IO[bytes], size: int, n: int, d: int, out: CheckOutcome,
            idx_key: str) -> tuple[int | None, int | None, bool]:
    """(sequence count, document count, multimodal) that the file supports. A count that
    disagrees with the file size is taken as damaged only when the other count and the size
    give a value whose last document index is the sequence count (as megatron-core asserts);
    otherwise the index is truncated (or has trailing bytes)."""
    def need(n_: int, d_: int, mm: bool) -> int:
        return HEADER_SIZE + 12 * n_ + 8 * d_ + (n_ if mm else 0)

    def last_doc_is(n_: int, d_: int) -> bool:
        at = HEADER_SIZE + 12 * n_ + 8 * (d_ - 1)
        if d_ < 1 or at + 8 > size:
            return False
        fh.seek(at)
        raw = read_exact(fh, 8)
        return len(raw) == 8 and struct.unpack("<q", raw)[0] == n_

    for mm in (False, True):
        if size == need(n, d, mm):
            return n, d, mm
    body = size - HEADER_SIZE
    for mm in (False, True):
        per = 13 if mm else 12
        rest = body - 8 * d
        if rest >= 0 and rest % per == 0 and rest // per != n and last_doc_is(rest // per, d):
            out.bad.append(BadRecord(None, 18, idx_key, f"sequence count field says {n}; the "
                                     f"index holds {rest // per} sequences (count damaged)"))
            return rest // per, d, mm
        rest = body - per * n
        if rest > 0 and rest % 8 == 0 and rest // 8 != d and last_doc_is(n, rest // 8):
            out.bad.append(BadRecord(None, 26, idx_key, f"document count field says {d}; the "
                                     f"index holds {rest // 8} document indices (count "
                                     "damaged)"))
            return n, rest // 8, mm
    full = need(n, d, False)
    if size < full:
        entry, where = _first_missing(size, n, d)
        out.bad.append(BadRecord(entry, size, idx_key, f"index truncated: {size} of {full} "
                                 f"bytes; {where} missing from entry {entry} on"))
        if size >= HEADER_SIZE + 12 * n:  # lengths and pointers whole: check those
            return n, (size - HEADER_SIZE - 12 * n) // 8, False
        return None, None, False
    out.bad.append(BadRecord(None, full, idx_key, f"{size - full} unexpected bytes after the "
                             "index (not a multimodal mode table either)"))
    return n, d, False


def _first_missing(size: int, n: int, d: int) -> tuple[int, str]:
    body = size - HEADER_SIZE
    if body < 4 * n:
        return body // 4, "sequence lengths"
    if body < 12 * n:
        return (body - 4 * n) // 8, "sequence pointers"
    return (body - 12 * n) // 8, "document indices"


class _Ctx:
    def __init__(self, fh: IO[bytes], size: int, out: CheckOutcome, itemsize: int,
                 bin_size: int | None, bin_key: str, idx_key: str) -> None:
        self.fh, self.size, self.out, self.itemsize = fh, size, out, itemsize
        self.bin_size, self.bin_key, self.idx_key = bin_size, bin_key, idx_key
        self.bad_sequences = 0
        self.listed = 0

    def bad(self, index: int | None, offset: int | None, key: str, problem: str) -> None:
        if self.listed < MAX_BAD:
            self.out.bad.append(BadRecord(index, offset, key, problem))
        elif self.listed == MAX_BAD:
            self.out.bad.append(BadRecord(None, None, key, f"more than {MAX_BAD} bad entries; "
                                          "the rest are not listed"))
        self.listed += 1

    def _read_array(self, offset: int, count: int, fmt: str) -> Any:
        import numpy as np

        width = np.dtype(fmt).itemsize
        self.fh.seek(offset)
        raw = read_exact(self.fh, count * width)
        return np.frombuffer(raw, dtype=fmt, count=len(raw) // width)

    def sequences(self, n: int) -> None:
        """Lengths and pointers chunk by chunk, with one entry of look-ahead to tell a damaged
        pointer (the chain breaks before and after it) from a damaged length (one break)."""
        import numpy as np

        it = self.itemsize
        sizes_at = HEADER_SIZE
        ptrs_at = HEADER_SIZE + 4 * n
        prev_end = 0  # where sequence i-1 ends (its pointer + its length x itemsize)
        skip = -1
        for start in range(0, n, CHUNK):
            count = min(CHUNK, n - start)
            ahead = 1 if start + count < n else 0
            sizes = self._read_array(sizes_at + 4 * start, count + ahead, "<i4").astype(np.int64)
            ptrs = self._read_array(ptrs_at + 8 * start, count + ahead, "<i8")
            if len(sizes) < count + ahead or len(ptrs) < count + ahead:
                return  # the truncation is reported by _layout
            ends = ptrs + sizes * it
            prevs = np.concatenate(([prev_end], ends[:-1]))
            blamed = np.zeros(count, dtype=bool)
            broken = (ptrs[:count] != prevs[:count]) | (sizes[:count] < 0)
            for j in np.flatnonzero(broken).tolist():
                i = start + j
                if i == skip:
                    continue
                if sizes[j] < 0:
                    blamed[j] = True
                    self.bad(i, sizes_at + 4 * i, self.idx_key,
                             f"sequence {i}: negative length {int(sizes[j])}")
                    continue
                should_end = int(prevs[j] + sizes[j] * it)
                if (j + 1 < len(ptrs) and ptrs[j + 1] == should_end) or \
                        (i == n - 1 and self.bin_size == should_end):
                    # the chain resumes after i as if i started where i-1 ends: i's pointer
                    blamed[j] = True
                    self.bad(i, ptrs_at + 8 * i, self.idx_key,
                             f"sequence {i}: pointer {int(ptrs[j])} damaged (sequence "
                             f"{i - 1} ends at {int(prevs[j])}; pointers must be contiguous)")
                    ends[j] = should_end
                    skip = i + 1
                elif i == 0:
                    blamed[j] = True
                    self.bad(0, ptrs_at, self.idx_key,
                             f"sequence 0 starts at {int(ptrs[0])}, not 0")
                else:
                    if j:
                        blamed[j - 1] = True
                    self.bad(i - 1, sizes_at + 4 * (i - 1), self.idx_key,
                             f"sequence {i - 1}: length damaged: it ends at {int(prevs[j])} "
                             f"but sequence {i} starts at {int(ptrs[j])}")
            self.bad_sequences += int(blamed.sum())
            prev_end = int(ends[count - 1])
            if self.bin_size is not None:
                past = np.flatnonzero((ends[:count] > self.bin_size) & ~blamed)
                if len(past):
                    j = int(past[0])
                    first = start + j
                    lost = n - first
                    self.bad_sequences += lost
                    self.bad(first, int(ptrs[j]), self.bin_key,
                             f"sequence {first} runs past the end of {self.bin_key} "
                             f"({int(ends[j])} > {self.bin_size} bytes): sequences "
                             f"{first}..{n - 1} ({lost}) are missing or cut (.bin truncated)")
                    return
        if self.bin_size is not None and prev_end < self.bin_size and n:
            self.bad_sequences += 1
            self.bad(n - 1, prev_end, self.bin_key,
                     f"{self.bin_size - prev_end} bytes in {self.bin_key} after the last "
                     f"sequence {n - 1} (the index describes {prev_end} bytes): its length "
                     "is damaged or data was appended")

    def documents(self, n: int, d: int, *, whole: bool = True) -> None:
        import numpy as np

        at = HEADER_SIZE + 12 * n
        prev = 0  # the last good document index
        for start in range(0, d, CHUNK):
            docs = self._read_array(at + 8 * start, min(CHUNK, d - start), "<i8")
            if not len(docs):
                return
            prevs = np.concatenate(([prev], docs[:-1]))
            broken = (docs < prevs) | (docs > n) | (docs < 0)
            if start == 0:
                broken[0] = docs[0] != 0
            if not broken.any():
                prev = int(docs[-1])
                continue
            for j, value in enumerate(docs.tolist()):  # a damaged chunk: entry by entry
                k = start + j
                if (k == 0 and value != 0) or value < prev or value > n:
                    self.bad(k, at + 8 * k, self.idx_key,
                             f"document index {k} is {value}: must be "
                             + ("0" if k == 0 else f"between {prev} and {n}"))
                else:
                    prev = value
        if whole and d and prev != n:
            self.bad(d - 1, at + 8 * (d - 1), self.idx_key,
                     f"last document index is {prev}, not the sequence count {n} "
                     "(megatron-core asserts they are equal)")
