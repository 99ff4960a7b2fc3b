"""Salvage rule for TensorBundle checkpoints (used by SavedModel too).

Who calls it: the generic ``ckptrescue.checkpoints.salvage`` through the TF format classes'
``iter_verified_tensors`` (which variables verify) and ``read_tensor_bytes`` (their bytes).
Plain variables stream from their verified range of the shard. A sliced variable (split across
shards by ``MaxShardSizePolicy``) is reassembled with numpy from its slices, each re-read and
re-verified against its CRC32C — one variable in memory at a time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import CheckpointReport, TensorRecord
from ckptrescue.checkpoints.formats.chunked import iter_chunks
from ckptrescue.checkpoints.formats.tensorbundle_entries import DTYPES, BundleEntry
from ckptrescue.checkpoints.formats.tensorbundle_index import (
    index_path,
    read_index,
    shard_count,
    sliced_parents,
)
from ckptrescue.checkpoints.formats.tensorbundle_verify import Shard, close_shards, open_shards

CHUNK = 1024 * 1024
SLICED = "sliced"


def _np_dtype(code: int) -> Any:
    import numpy as np

    npdt = DTYPES.get(code, (None, None, None))[1]
    itemsize = DTYPES.get(code, (None, None, None))[2]
    if npdt is None:  # bfloat16 / float8: bytes move as unsigned ints of the same width
        return np.dtype({2: "<u2", 1: "|u1"}[itemsize]) if itemsize in (1, 2) else None
    return np.dtype(npdt)


def _reassemble(parent: BundleEntry, pieces: list[BundleEntry],
                shards: dict[int, Shard]) -> bytes | str:
    """The full variable's bytes from its verified slices, or why that is impossible."""
    import google_crc32c
    import numpy as np

    from ckptrescue.checkpoints.formats.crc32c import unmask

    npdt = _np_dtype(parent.dtype)
    if npdt is None or parent.shape is None:
        return f"dtype {parent.dtype_name} cannot be reassembled"
    if {p.slice.text() for p in pieces if p.slice} != {s.text() for s in parent.slices}:
        return "slices missing"
    full = np.zeros(parent.shape, dtype=npdt)
    for p in pieces:
        sh = shards.get(p.shard_id)
        if sh is None or sh.fh is None or p.crc32c is None or p.slice is None \
                or p.shape is None:
            return "a slice's shard or CRC is missing"
        sh.fh.seek(p.offset)
        raw = sh.fh.read(p.size)
        if len(raw) != p.size or google_crc32c.extend(0, raw) != unmask(p.crc32c):
            return "a slice fails its CRC32C"
        where = tuple(slice(st, None if ln is None else st + ln) for st, ln in p.slice.extents)
        full[where] = np.frombuffer(raw, dtype=npdt).reshape(p.shape)
    return full.tobytes()


def _reassembled(prefix: Path, name: str) -> bytes | str:
    index = read_index(prefix)
    parent = sliced_parents(index).get(name)
    if parent is None:
        return "not a sliced variable"
    shards = open_shards(prefix, shard_count(index, prefix))
    try:
        return _reassemble(parent, [e for e in index.entries if e.parent == name], shards)
    finally:
        close_shards(shards)


def bundle_salvageable(prefix: Path, report: CheckpointReport,
                       ) -> Iterator[tuple[TensorRecord, str | None]]:
    """Every variable with ``None`` when its bytes verify, else the reason it is lost."""
    groups: dict[str, list[TensorRecord]] = defaultdict(list)
    for rec in report.tensors:
        groups[rec.name].append(rec)
    parents = sliced_parents(read_index(prefix)) if index_path(prefix).exists() else {}
    for name, recs in groups.items():
        if name not in parents:
            for rec in recs:
                usable = rec.status in ("ok", "suspect") and rec.offset is not None
                yield rec, None if usable else ("; ".join(rec.reasons) or rec.status)
            continue
        parent = parents[name]
        summary = TensorRecord(name=name, dtype=parent.dtype_name, shape=parent.shape,
                               storage=SLICED, status="ok",
                               reasons=[f"reassembled from {len(parent.slices)} slices"])
        bad = [r for r in recs if r.status not in ("ok", "suspect")]
        if bad or len(recs) != len(parent.slices):
            why = (f"slice {bad[0].storage}: {'; '.join(bad[0].reasons) or bad[0].status}"
                   if bad else "slices missing")
            summary.status = bad[0].status if bad else "missing"
            yield summary, why
            continue
        yield summary, None


def read_bundle_tensor(prefix: Path, rec: TensorRecord) -> Iterator[bytes]:
    """The C-contiguous bytes of one salvageable variable, in chunks."""
    if rec.storage == SLICED:
        data = _reassembled(prefix, rec.name)
        if isinstance(data, str):
            raise ValueError(f"{rec.name}: {data}")
        for i in range(0, len(data), CHUNK):
            yield data[i:i + CHUNK]
        return
    assert rec.file is not None and rec.offset is not None and rec.length is not None
    with Path(rec.file).open("rb") as fh:
        fh.seek(rec.offset)
        yield from iter_chunks(fh, rec.length, CHUNK)
