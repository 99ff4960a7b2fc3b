"""Ranged reads of pinned object versions: a block cache with read-ahead, and the accounting of
how many bytes of how many objects were read in how many requests.

One :class:`RangeReader` per object: reads are cut into ``block_size`` blocks fetched with one
ranged GET each through the store's pool (``concurrency`` requests in flight per store). Reads
that continue one of the last few forward streams (a format may walk two tensors at once) get
that stream's next ``readahead`` blocks fetched before it asks. A read that continues no stream
(a header, a zip central directory, a safetensors header, a TensorBundle index) starts a stream
and its blocks stay cached (up to ``MAX_PINNED``), as do the first and last blocks; other blocks
are dropped least-recently-used. A block is fetched once unless it was dropped and asked for
again, so a forward pass reads each byte once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from ckptrescue.model import JsonObject
from ckptrescue.stores.base import ObjectInfo, Store

MAX_STREAMS = 8
MAX_PINNED = 8
UNIT = 64 * 1024  # what a read that continues no stream fetches (headers, directories)
MAX_UNITS = 256  # 16 MiB of such units per object, kept
MAX_UNIT_READ = 1 << 20  # a larger out-of-stream read takes whole blocks


@dataclass
class ObjectAccount:
    url: str
    key: str
    size: int
    version: str | None
    bytes_read: int = 0
    requests: int = 0
    errors: int = 0

    def to_json(self) -> JsonObject:
        return {"url": self.url, "key": self.key, "size": self.size, "version": self.version,
                "bytes_read": self.bytes_read, "requests": self.requests,
                "errors": self.errors}


@dataclass
class Accounting:
    """What a view read from a store: per object, bytes and ranged GETs; plus metadata calls.
    ``to_json()`` is the record the engine logs and the report shows."""

    url: str
    store: str
    objects: dict[str, ObjectAccount] = field(default_factory=dict)
    operations: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, key: str, nbytes: int, *, error: bool = False) -> None:
        with self._lock:
            item = self.objects[key]
            item.requests += 1
            item.bytes_read += nbytes
            item.errors += int(error)

    @property
    def bytes_read(self) -> int:
        return sum(o.bytes_read for o in self.objects.values())

    @property
    def objects_read(self) -> int:
        return sum(1 for o in self.objects.values() if o.requests)

    @property
    def object_bytes(self) -> int:
        """Total size of the objects that were read from (the ratio's denominator)."""
        return sum(o.size for o in self.objects.values() if o.requests)

    def to_json(self) -> JsonObject:
        total = self.object_bytes
        return {
            "url": self.url, "store": self.store,
            "objects_listed": len(self.objects), "objects_read": self.objects_read,
            "bytes_read": self.bytes_read, "object_bytes": total,
            "read_ratio": round(self.bytes_read / total, 4) if total else None,
            "ranged_gets": sum(o.requests for o in self.objects.values()),
            "operations": dict(sorted(self.operations.items())),
            "objects": [o.to_json() for _, o in sorted(self.objects.items()) if o.requests],
        }


class RangeReader:
    """Block-cached, read-ahead reads of one pinned object version (thread-safe)."""

    def __init__(self, store: Store, obj: ObjectInfo, pool: ThreadPoolExecutor,
                 accounting: Accounting, *, block_size: int, readahead: int,
                 cache_blocks: int) -> None:
        self.store, self.obj, self.pool, self.accounting = store, obj, pool, accounting
        self.block_size = block_size
        self.readahead = readahead
        self.capacity = max(cache_blocks, readahead + 2)
        self.nblocks = (obj.size + block_size - 1) // block_size
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._inflight: dict[int, Future[bytes]] = {}
        self._lock = threading.Lock()
        self._streams: list[int] = [0]  # where forward readers will read next, oldest first
        self._pins: set[int] = {0, self.nblocks - 1}
        self._units: dict[int, bytes] = {}  # UNIT-aligned small reads outside any stream

    def _get(self, start: int, unit: int) -> bytes:
        """One ranged GET of ``unit`` bytes from ``start`` (fewer at the end), counted."""
        length = min(unit, self.obj.size - start)
        try:
            data = self.store.read_range(self.obj, start, length)
        except Exception:
            self.accounting.add(self.obj.key, 0, error=True)
            raise
        self.accounting.add(self.obj.key, len(data))
        if len(data) != length:
            raise OSError(f"short range read: {len(data)} of {length} bytes at {start}")
        return data

    def _fetch(self, index: int) -> bytes:
        return self._get(index * self.block_size, self.block_size)

    def _pinned(self, index: int) -> bool:
        return index in self._pins

    def _continues(self, offset: int, end: int) -> bool:
        """Whether a read continues a forward stream (lock held); the stream moves to ``end``."""
        window = self.block_size * max(1, self.readahead)
        for i, at in enumerate(self._streams):
            if at - self.block_size <= offset <= at + window:
                del self._streams[i]
                self._streams.append(end)
                return True
        self._streams.append(end)
        del self._streams[:-MAX_STREAMS]
        return False

    def _store_block(self, index: int, data: bytes) -> None:
        self._cache[index] = data
        self._cache.move_to_end(index)
        while len(self._cache) > self.capacity:
            victim = next((i for i in self._cache if not self._pinned(i)), None)
            if victim is None:
                break
            del self._cache[victim]

    def _future(self, index: int) -> Future[bytes] | None:
        """The in-flight fetch of block ``index``, started if needed (lock held)."""
        if index in self._cache or index >= self.nblocks:
            return None
        fut = self._inflight.get(index)
        if fut is None:
            fut = self.pool.submit(self._fetch, index)
            self._inflight[index] = fut
        return fut

    def _block(self, index: int) -> bytes:
        with self._lock:
            data = self._cache.get(index)
            if data is not None:
                self._cache.move_to_end(index)
                return data
            fut = self._future(index)
        assert fut is not None
        try:
            data = fut.result()
        finally:
            with self._lock:
                if self._inflight.get(index) is fut:
                    del self._inflight[index]
        with self._lock:
            self._store_block(index, data)
        return data

    def _unit(self, index: int) -> bytes:
        with self._lock:
            data = self._units.get(index)
        if data is None:
            data = self._get(index * UNIT, UNIT)
            with self._lock:
                if len(self._units) < MAX_UNITS:
                    self._units[index] = data
        return data

    def _from_units(self, offset: int, end: int) -> bytes:
        first, last = offset // UNIT, (end - 1) // UNIT
        parts = [self._unit(i) for i in range(first, last + 1)]
        data = b"".join(parts)
        return data[offset - first * UNIT:end - first * UNIT]

    def read(self, offset: int, size: int) -> bytes:
        if offset >= self.obj.size or size <= 0:
            return b""
        end = min(self.obj.size, offset + size)
        with self._lock:
            first_unit, last_unit = offset // UNIT, (end - 1) // UNIT
            in_units = all(i in self._units for i in range(first_unit, last_unit + 1))
            cached = all(i in self._cache for i in range(offset // self.block_size,
                                                          (end - 1) // self.block_size + 1))
            forward = self._continues(offset, end)
        if in_units and not cached:
            return self._from_units(offset, end)
        if not forward and not cached and end - offset <= MAX_UNIT_READ:
            return self._from_units(offset, end)
        return self._read_blocks(offset, end, forward)

    def _read_blocks(self, offset: int, end: int, forward: bool) -> bytes:
        first, last = offset // self.block_size, (end - 1) // self.block_size
        with self._lock:
            if not forward:
                for index in range(first, last + 1):
                    if len(self._pins) < MAX_PINNED + 2:
                        self._pins.add(index)
            for index in range(first, last + 1):
                self._future(index)
            if forward and self.readahead:
                for index in range(last + 1, min(self.nblocks, last + 1 + self.readahead)):
                    self._future(index)
        parts = []
        for index in range(first, last + 1):
            block = self._block(index)
            lo = max(offset, index * self.block_size) - index * self.block_size
            hi = min(end, (index + 1) * self.block_size) - index * self.block_size
            parts.append(block[lo:hi])
        return b"".join(parts)

    def drain(self) -> None:
        """Wait for read-ahead still in flight (so the accounting is final)."""
        with self._lock:
            pending = list(self._inflight.values())
        wait(pending)
