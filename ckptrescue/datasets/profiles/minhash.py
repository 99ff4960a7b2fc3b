"""Near-duplicate records: MinHash signatures over byte shingles, LSH bands, fixed seeds.

A record's text (lower-cased, whitespace collapsed, the first :data:`MAX_TEXT` bytes) is cut into
overlapping :data:`SHINGLE`-byte shingles; each shingle (its 5 bytes as an integer) is mixed once
by SplitMix64's finaliser with a fixed seed (64-bit wrap-around integer arithmetic, so the same
everywhere). One-permutation MinHash: the top 6 bits of the mix pick one of
:data:`PERMUTATIONS` bins, each bin keeps its smallest value, and empty bins are filled by
rotation; the share of equal positions in two signatures estimates the Jaccard similarity of
their shingle sets. The signature is cut into :data:`BANDS` bands; a record whose band matches
an earlier record's is a candidate, and a near duplicate when the estimated Jaccard is at least
:data:`JACCARD`. Signatures are computed for blocks of texts at once (numpy) and the bands
matched for the whole shard at the end.

Memory is bounded: signatures are kept for the first :data:`CAPACITY` records with text; the
rate is measured over those (``checked`` says how many).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SHINGLE = 5
PERMUTATIONS = 64
BANDS = 16
ROWS = PERMUTATIONS // BANDS
JACCARD = 0.8
MAX_TEXT = 8192
CAPACITY = 20_000
_SEED = 0x636B7074726573  # "ckptres": the fixed seed of the shingle mix
_VALUE_BITS = 52               # a bin's value: the low 52 bits of the shingle's mixed hash
_BIN_SHIFT = 64 - 6            # its bin: the top 6 bits (PERMUTATIONS == 64 bins)
_EMPTY = (1 << 64) - 1


def normalise(text: str) -> bytes:
    # whitespace runs -> one space, trimmed: str.split() splits on exactly the characters re's
    # \s matches (str.isspace), so this equals re.sub(r"\s+", " ", ...).strip(), 4x faster
    return " ".join(text.lower().split()).encode("utf-8", "surrogatepass")[:MAX_TEXT]


_ASCII_TABLE: Any = None


def normalise_ascii(data: Any, offsets: Any) -> tuple[Any, Any]:
    """(bytes, lengths) of :func:`normalise` of every segment ``data[offsets[i]:offsets[i+1]]``
    of ASCII text, with numpy: lower case and every space character (``str.isspace``) to a
    space by one table, leading and trailing runs dropped, inner runs cut to one space, the
    first :data:`MAX_TEXT` bytes kept."""
    import numpy as np

    global _ASCII_TABLE
    if _ASCII_TABLE is None:
        table = [ord(chr(b).lower()) if b < 128 else b for b in range(256)]
        for b in range(128):
            if chr(b).isspace():
                table[b] = 32
        _ASCII_TABLE = bytes(table)
    offsets = np.asarray(offsets, dtype=np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    d = np.frombuffer(np.asarray(data, dtype=np.uint8)[lo:hi].tobytes().translate(_ASCII_TABLE),
                      dtype=np.uint8)
    starts, ends = offsets[:-1] - lo, offsets[1:] - lo
    some = ends > starts
    size = hi - lo
    first_byte = np.zeros(size + 1, dtype=bool)
    first_byte[starts[some]] = True
    last_byte = np.zeros(size + 1, dtype=bool)
    last_byte[ends[some] - 1] = True
    sp = d == 32
    prev_sp = np.zeros(size, dtype=bool)
    prev_sp[1:] = sp[:-1]
    next_sp = np.zeros(size, dtype=bool)
    next_sp[:-1] = sp[1:]
    firsts = np.flatnonzero(sp & (first_byte[:size] | ~prev_sp))  # a run of spaces begins
    lasts = np.flatnonzero(sp & (last_byte[:size] | ~next_sp))  # ... and ends (same order)
    inner = ~first_byte[firsts] & ~last_byte[lasts]  # neither leading nor trailing
    keep = ~sp
    keep[firsts[inner]] = True
    out = d[keep]
    # each segment's length less its dropped spaces (few: a sorted search per drop)
    dropped = np.flatnonzero(~keep)
    lengths = (ends - starts) - np.bincount(np.searchsorted(ends, dropped, side="right"),
                                             minlength=len(starts))[: len(starts)]
    if lengths.size and int(lengths.max()) > MAX_TEXT:
        new_start = np.cumsum(lengths) - lengths
        owner = np.repeat(np.arange(len(lengths)), lengths)
        out = out[np.arange(len(out)) - new_start[owner] < MAX_TEXT]
        lengths = np.minimum(lengths, MAX_TEXT)
    return out, lengths


def normalise_many(texts: list[str]) -> tuple[Any, Any]:
    """(bytes, lengths) of :func:`normalise` of every text, concatenated (ASCII texts by
    :func:`normalise_ascii`, all at once)."""
    import numpy as np

    joined = "".join(texts)
    if joined.isascii():
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)),
                  out=offsets[1:])
        return normalise_ascii(np.frombuffer(joined.encode("ascii"), dtype=np.uint8), offsets)
    parts = [normalise(t) for t in texts]
    return (np.frombuffer(b"".join(parts), dtype=np.uint8),
            np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)))


def signatures(texts: list[bytes]) -> Any:
    """:func:`signatures_of` a list of normalised texts."""
    import numpy as np

    return signatures_of(np.frombuffer(b"".join(texts), dtype=np.uint8),
                         np.array([len(t) for t in texts], dtype=np.int64))


def signatures_of(data: Any, lengths: Any) -> Any:
    """MinHash signatures (uint64, one row per text) of normalised texts of at least
    :data:`SHINGLE` bytes, computed together (one numpy pass over their concatenation).

    One-permutation MinHash: every shingle hash is mixed once (SplitMix64's finaliser with a
    fixed seed); its top bits pick one of :data:`PERMUTATIONS` bins and each bin keeps the
    smallest low-bit value. An empty bin (short texts) borrows the value of the next non-empty
    bin to its right, circularly, plus its distance times 2**52 (densification by rotation,
    Shrivastava and Li 2014), so equal positions still estimate the Jaccard similarity."""
    import numpy as np

    count = len(lengths)
    n = len(data) - SHINGLE + 1
    ends = np.cumsum(lengths)
    # shingle i is bytes i..i+4: the low 40 bits of the little-endian word at byte i
    buf = np.concatenate([np.asarray(data, dtype=np.uint8), np.zeros(8, dtype=np.uint8)])
    words = np.ndarray((n,), dtype="<u8", buffer=buf, offset=0, strides=(1,))
    x = np.bitwise_and(words, np.uint64((1 << (8 * SHINGLE)) - 1), dtype=np.uint64)
    with np.errstate(over="ignore"):
        x += np.uint64(_SEED)
        t = x >> np.uint64(30)
        x ^= t
        x *= np.uint64(0xBF58476D1CE4E5B9)
        np.right_shift(x, np.uint64(27), out=t)
        x ^= t
        x *= np.uint64(0x94D049BB133111EB)
        np.right_shift(x, np.uint64(31), out=t)
        x ^= t
    # slot = text * PERMUTATIONS + bin; a text's last SHINGLE - 1 positions (shingles that run
    # into the next text) go to a spare slot past the end
    np.right_shift(x, np.uint64(_BIN_SHIFT), out=t)
    slot = t.view(np.int64)
    slot += np.repeat(np.arange(0, count * PERMUTATIONS, PERMUTATIONS, dtype=np.int64),
                      lengths)[:n]
    tails = (ends[:, None] - np.arange(1, SHINGLE)).ravel()
    slot[tails[tails < n]] = count * PERMUTATIONS
    x &= np.uint64((1 << _VALUE_BITS) - 1)
    sig = np.full(count * PERMUTATIONS + 1, _EMPTY, dtype=np.uint64)
    np.minimum.at(sig, slot, x)
    sig = sig[:-1]
    sig = sig.reshape(count, PERMUTATIONS)
    empty = sig == np.uint64(_EMPTY)
    if empty.any():
        # bin j takes the first non-empty bin j + t (circularly) plus t * 2**52
        filled = sig.copy()
        todo = empty.copy()
        t = 0
        while todo.any() and t < PERMUTATIONS:  # (a text with no shingle stays empty)
            t += 1
            src = np.roll(sig, -t, axis=1)
            take = todo & ~np.roll(empty, -t, axis=1)
            filled[take] = src[take] + np.uint64(t << _VALUE_BITS)
            todo &= ~take
        sig = filled
    return np.ascontiguousarray(sig)


def signature(text: str) -> Any | None:
    """The MinHash signature of one text (None when it is shorter than a shingle)."""
    data = normalise(text)
    return signatures([data])[0] if len(data) >= SHINGLE else None


BATCH_BYTES = 32 << 10


@dataclass
class NearDup:
    """Near-duplicate counter over the first :data:`CAPACITY` records with text.

    Texts are buffered and signed in batches; :meth:`finish` (at the end of the shard) finds,
    for every record, the earlier records that share one of its LSH bands (in each band, the
    first record that had that band: as a streaming band table would) and counts the record as
    a near duplicate when one of them has an estimated Jaccard of at least :data:`JACCARD`.
    """

    capacity: int = CAPACITY
    checked: int = 0
    near: int = 0
    _sigs: list[Any] = field(default_factory=list)
    _pending: list[bytes] = field(default_factory=list)
    _pending_bytes: int = 0

    @property
    def full(self) -> bool:
        return self.checked + len(self._pending) >= self.capacity

    def add(self, text: str) -> None:
        if self.full:
            return
        data = normalise(text)
        if len(data) < SHINGLE:
            return
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= BATCH_BYTES or len(self._pending) >= 512:
            self._flush()

    def add_many(self, texts: list[str]) -> None:
        """:meth:`add` every text of a block (normalised together)."""
        if self._pending:
            self._flush()
        left = self.capacity - self.checked
        if left <= 0 or not texts:
            return
        self.add_normalised(*normalise_many(texts))

    def add_normalised(self, data: Any, lengths: Any) -> None:
        """Add texts already normalised (concatenated bytes and their lengths); those shorter
        than a shingle are skipped, as :meth:`add` skips them."""
        import numpy as np

        if self._pending:
            self._flush()
        left = self.capacity - self.checked
        if left <= 0 or not len(lengths):
            return
        ok = np.flatnonzero(lengths >= SHINGLE)[:left]
        if not ok.size:
            return
        if ok.size < len(lengths):
            owner = np.repeat(np.arange(len(lengths)), lengths)
            keep = np.zeros(len(lengths), dtype=bool)
            keep[ok] = True
            data = data[keep[owner]]
            lengths = lengths[ok]
        self._sigs.append(signatures_of(data, lengths))
        self.checked += int(ok.size)

    def finish(self) -> None:
        if self._pending:
            self._flush()
        self.near = _near_count(self._sigs)

    def _flush(self) -> None:
        sigs = signatures(self._pending)
        self.checked += len(self._pending)
        self._pending = []
        self._pending_bytes = 0
        self._sigs.append(sigs)


def _near_count(blocks: list[Any]) -> int:
    """Records (rows of the signature blocks, in order) near-duplicating an earlier one."""
    import numpy as np

    from ckptrescue.datasets.profiles.vhash import mix64

    if not blocks:
        return 0
    sigs = np.ascontiguousarray(np.concatenate(blocks))
    n = len(sigs)
    order = np.arange(n)
    found = np.zeros(n, dtype=bool)
    # each band's key: its ROWS values mixed into one uint64 (a collision, at odds of about
    # n**2 / 2**64, could hide a candidate or add one the Jaccard check rejects)
    rows = sigs.reshape(n, BANDS, ROWS)
    band_keys = np.zeros((n, BANDS), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for r in range(ROWS):
            band_keys = mix64(band_keys * np.uint64(0x100000001B3) + rows[:, :, r])
    for band in range(BANDS):
        keys = band_keys[:, band]
        # the first record with each key (the smallest index of its group: whatever order
        # the sort leaves equal keys in)
        by_key = np.argsort(keys)
        sk = keys[by_key]
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(sk[1:], sk[:-1], out=new[1:])
        first = np.minimum.reduceat(by_key, np.flatnonzero(new))
        cand = np.empty(n, dtype=np.int64)
        cand[by_key] = first[np.cumsum(new) - 1]
        idx = np.flatnonzero((cand < order) & ~found)
        if idx.size:
            same = (sigs[idx] == sigs[cand[idx]]).sum(axis=1) / PERMUTATIONS
            found[idx[same >= JACCARD]] = True
    return int(found.sum())
