"""Reading ``n`` bytes of a stream a bounded chunk at a time (pure: it only calls ``read``).

A length field read from evidence may lie; reading what it says a chunk at a time allocates no
more than the stream holds, and a stream that ends early simply yields less. Checkpoint
readers, dataset container checks and the offline file rebuild all read (or skip, or copy)
declared lengths this one way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

CHUNK = 1 << 20  # the most one read asks for


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


def iter_chunks(fh: Readable, n: int, chunk: int = CHUNK) -> Iterator[bytes]:
    """The next ``n`` bytes of ``fh``, at most ``chunk`` a read, looping over short reads;
    fewer in all only when the stream ends first (nothing for ``n <= 0``)."""
    left = n
    while left > 0:
        block = fh.read(min(left, chunk))
        if not block:
            return
        yield block
        left -= len(block)


def skip(fh: Readable, n: int) -> int:
    """Read past the next ``n`` bytes of a stream that cannot seek; the bytes skipped (fewer
    than ``n`` only at the end of the stream)."""
    return sum(len(block) for block in iter_chunks(fh, n))
