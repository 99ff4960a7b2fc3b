"""Fan-out over an existing Dask cluster (``--scheduler ADDRESS``, the ``[cluster]`` extra).

Files are grouped into batches of similar byte count; each batch runs on a worker, which reads
the files where they live (the workers must see DIR at the same path: a shared filesystem).
Results come back as plain dataclasses and merge into the same outputs as a local run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ckptrescue.datasets.walk import FileEntry
from ckptrescue.errors import RemoteError, ToolMissingError, UsageError

T = TypeVar("T")
BATCH_BYTES = 256 << 20
BATCH_FILES = 512


def batches(entries: list[FileEntry], *, max_bytes: int = BATCH_BYTES,
            max_files: int = BATCH_FILES) -> list[list[FileEntry]]:
    """Consecutive groups of at most ``max_files`` files or about ``max_bytes`` bytes."""
    out: list[list[FileEntry]] = []
    cur: list[FileEntry] = []
    size = 0
    for e in entries:
        if cur and (len(cur) >= max_files or size + e.size > max_bytes):
            out.append(cur)
            cur, size = [], 0
        cur.append(e)
        size += e.size
    if cur:
        out.append(cur)
    return out


_ADDRESS = re.compile(r"^((tcp|tls|ucx|ws|wss|inproc)://)?[^\s:/]+(:\d+)?$|"
                      r"^(tcp|tls|ucx|ws|wss)://\[[0-9a-fA-F:]+\](:\d+)?$")


def _client(address: str) -> Any:
    if not _ADDRESS.match(address) or ":" not in address.split("://")[-1]:
        raise UsageError(f"--scheduler {address!r}: not a Dask scheduler address "
                         "(expected tcp://HOST:PORT)")
    try:
        from distributed import Client
    except ImportError as exc:
        raise ToolMissingError(
            "--scheduler needs Dask distributed, which is not installed",
            hint="pip install 'ckptrescue[cluster]'  (or: pip install 'dask[distributed]')",
        ) from exc
    try:
        return Client(address, timeout="20s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise RemoteError(f"cannot reach the Dask scheduler at {address}: {exc}") from exc


def connect(address: str) -> Any:
    """A Dask client for ``address`` (one-line errors when Dask is missing or unreachable)."""
    return _client(address)


def map_batches(address: str, fn: Callable[[bytes, list[FileEntry]], list[T]], root: bytes,
                entries: list[FileEntry]) -> Iterator[list[T]]:
    """Run ``fn(root, batch)`` for every batch on the cluster; yield results as they finish."""
    if not entries:
        return
    client = _client(address)
    from distributed import as_completed

    try:
        seen = client.run(os.path.isdir, root)
        blind = sorted(w for w, ok in seen.items() if not ok)
        if not seen:
            raise RemoteError(f"the Dask cluster at {address} has no workers")
        if blind:
            raise RemoteError(f"{len(blind)} Dask worker(s) do not see {os.fsdecode(root)}: "
                              + ", ".join(blind[:3]),
                              hint="workers read files where they live: mount DIR at the same "
                                   "path on every worker")
        futures = [client.submit(fn, root, b, pure=False) for b in batches(entries)]
        for fut in as_completed(futures, loop=client.loop):
            yield fut.result()
    finally:
        client.close()
