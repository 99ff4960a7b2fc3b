"""Near-duplicate records: MinHash signatures over byte shingles, LSH bands, fixed seeds.

A record's text (lower-cased, whitespace collapsed, the first :data:`MAX_TEXT` bytes) is cut into
overlapping :data:`SHINGLE`-byte shingles, each hashed with a polynomial rolling hash (64-bit
wrap-around integer arithmetic, so the same everywhere). :data:`PERMUTATIONS` bijective mixes of
those hashes, with constants derived from fixed seeds, give the signature: the share of equal
positions in two signatures estimates the Jaccard similarity of their shingle sets. The
signature is cut into :data:`BANDS` bands; a record whose band matches an earlier record's is a
candidate, and a near duplicate when the estimated Jaccard is at least :data:`JACCARD`.

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
_MASK = (1 << 64) - 1
_PRIME = 0x100000001B3  # FNV-64 prime as the polynomial base


def _splitmix(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


def _constants() -> tuple[list[int], list[int]]:
    state = 0x636B7074726573  # "ckptres": the fixed seed
    mul, add = [], []
    for _ in range(PERMUTATIONS):
        state, a = _splitmix(state)
        state, b = _splitmix(state)
        mul.append(a | 1)
        add.append(b)
    return mul, add


_MUL, _ADD = _constants()
_MUL_COL: Any = None  # the constants as numpy columns, made on first use (numpy is lazy)
_ADD_COL: Any = None


def normalise(text: str) -> bytes:
    # whitespace runs -> one space, trimmed: str.split() splits on exactly the characters re's
    # \s matches (str.isspace), so this equals re.sub(r"\s+", " ", ...).strip(), 4x faster
    return " ".join(text.lower().split()).encode("utf-8", "surrogatepass")[:MAX_TEXT]


def signatures(texts: list[bytes]) -> Any:
    """MinHash signatures (uint64, one row per text) of normalised texts of at least
    :data:`SHINGLE` bytes, computed together (one numpy pass over their concatenation)."""
    import numpy as np

    global _MUL_COL, _ADD_COL
    if _MUL_COL is None:
        _MUL_COL = np.array(_MUL, dtype=np.uint64)[:, None]
        _ADD_COL = np.array(_ADD, dtype=np.uint64)[:, None]
    data = b"".join(texts)
    b = np.frombuffer(data, dtype=np.uint8).astype(np.uint64)
    n = len(b) - SHINGLE + 1
    h = np.zeros(n, dtype=np.uint64)
    prime = np.uint64(_PRIME)
    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    owner = np.repeat(np.arange(len(texts)), lengths)[:n]
    valid = np.arange(n) + SHINGLE <= ends[owner]  # the shingle lies inside its own text
    with np.errstate(over="ignore"):
        for j in range(SHINGLE):
            h = h * prime + b[j : j + n]
        h = h[valid]
        # permutations x shingles, so the per-text minimum reduces along contiguous rows
        # (much faster than reducing along axis 0); in-place steps, one temporary
        x = np.multiply(_MUL_COL, h[None, :])
        x += _ADD_COL
        t = np.right_shift(x, np.uint64(29))
        x ^= t
        x *= np.uint64(0xBF58476D1CE4E5B9)
        np.right_shift(x, np.uint64(32), out=t)
        x ^= t
    # every text has at least one shingle, so the first valid shingle of text i is at
    # starts[i] - (number of invalid positions before it)
    first = np.searchsorted(np.flatnonzero(valid), starts)
    return np.ascontiguousarray(np.minimum.reduceat(x, first, axis=1).T)


def signature(text: str) -> Any | None:
    """The MinHash signature of one text (None when it is shorter than a shingle)."""
    data = normalise(text)
    return signatures([data])[0] if len(data) >= SHINGLE else None


BATCH_BYTES = 32 << 10


@dataclass
class NearDup:
    """Streaming near-duplicate counter over the first :data:`CAPACITY` records with text.

    Texts are buffered and signed in batches; call :meth:`finish` at the end of the shard.
    """

    capacity: int = CAPACITY
    checked: int = 0
    near: int = 0
    _bands: list[dict[bytes, int]] = field(default_factory=lambda: [{} for _ in range(BANDS)])
    _sigs: list[Any] = field(default_factory=list)
    _pending: list[bytes] = field(default_factory=list)
    _pending_bytes: int = 0

    def add(self, text: str) -> None:
        if self.checked + len(self._pending) >= self.capacity:
            return
        data = normalise(text)
        if len(data) < SHINGLE:
            return
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= BATCH_BYTES or len(self._pending) >= 512:
            self._flush()

    def finish(self) -> None:
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        sigs = signatures(self._pending)
        self._pending = []
        self._pending_bytes = 0
        for sig in sigs:
            self._one(sig)

    def _one(self, sig: Any) -> None:
        index = len(self._sigs)
        self._sigs.append(sig)
        self.checked += 1
        found = False
        tried: set[int] = set()
        raw = sig.tobytes()
        width = len(raw) // BANDS
        for band in range(BANDS):
            key = raw[band * width : (band + 1) * width]
            table = self._bands[band]
            other = table.get(key)
            if other is None:
                table[key] = index
            elif not found and other not in tried:
                tried.add(other)
                if float((self._sigs[other] == sig).mean()) >= JACCARD:
                    found = True
        if found:
            self.near += 1
