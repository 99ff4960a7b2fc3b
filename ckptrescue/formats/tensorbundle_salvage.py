"""Salvage rule for TensorBundle checkpoints (used by SavedModel too).

Who calls it: the generic ``ckptrescue.salvage`` through ``iter_verified_tensors`` of the TF
format classes. Plain variables point at their verified bytes in the shard; a sliced variable
(split across shards by ``MaxShardSizePolicy``) is reassembled from its re-verified slices with
numpy. The generic salvage copies one byte range per tensor, so reassembled bytes are handed over
through a private temp file (never next to the evidence), removed at exit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ckptrescue.checkpoint import CheckpointReport, TensorRecord
from ckptrescue.formats.tensorbundle_entries import DTYPES, BundleEntry
from ckptrescue.formats.tensorbundle_index import (
    index_path,
    read_index,
    shard_count,
    sliced_parents,
)
from ckptrescue.formats.tensorbundle_verify import Shard, close_shards, open_shards


def _reassemble(parent: BundleEntry, pieces: list[BundleEntry],
                shards: dict[int, Shard]) -> bytes | str:
    """The full variable's bytes from its verified slices, or why that is impossible."""
    import google_crc32c
    import numpy as np

    from ckptrescue.formats.sstable import unmask

    assert parent.shape is not None
    npdt = _np_dtype(parent.dtype)
    if npdt is None:
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


_TEMP_FILES: list[str] = []


def _cleanup_temp() -> None:
    import os

    for name in _TEMP_FILES:
        try:
            os.unlink(name)
        except OSError:
            pass
    _TEMP_FILES.clear()


def _spill(data: bytes) -> str:
    """Write reassembled bytes to a private temp file (never next to the evidence)."""
    import atexit
    import os
    import tempfile

    if not _TEMP_FILES:
        atexit.register(_cleanup_temp)
    fd, name = tempfile.mkstemp(prefix="ckptrescue-tf-slices-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    _TEMP_FILES.append(name)
    return name


def bundle_salvageable(prefix: Path, report: CheckpointReport,
                       ) -> Iterator[tuple[TensorRecord, str | None]]:
    """Salvage rule: every variable with ``None`` when its bytes verify, else the reason.

    Plain variables point at their verified bytes in the shard. A sliced variable (split across
    shards) is reassembled from its re-verified slices; the generic salvage copies one byte range
    per tensor, so the reassembled bytes are handed over through a private temp file.
    """
    groups: dict[str, list[TensorRecord]] = defaultdict(list)
    for rec in report.tensors:
        groups[rec.name].append(rec)
    index = read_index(prefix) if index_path(prefix).exists() else None
    parents = sliced_parents(index) if index is not None else {}
    shards = open_shards(prefix, shard_count(index, prefix)) if index is not None else {}
    try:
        for name, recs in groups.items():
            if name not in parents:
                for rec in recs:
                    usable = rec.status in ("ok", "suspect") and rec.offset is not None
                    yield rec, None if usable else ("; ".join(rec.reasons) or rec.status)
                continue
            parent = parents[name]
            summary = TensorRecord(name=name, dtype=parent.dtype_name, shape=parent.shape,
                                   storage=f"{len(parent.slices)} slices", status="ok")
            bad = [r for r in recs if r.status not in ("ok", "suspect")]
            if bad:
                summary.status = bad[0].status
                yield summary, "slice " + (bad[0].storage or "") + ": " + (
                    "; ".join(bad[0].reasons) or bad[0].status)
                continue
            assert index is not None
            pieces = [e for e in index.entries if e.parent == name]
            data = _reassemble(parent, pieces, shards)
            if isinstance(data, str):
                yield summary, data
                continue
            summary.file, summary.offset, summary.length = _spill(data), 0, len(data)
            yield summary, None
    finally:
        close_shards(shards)


def _np_dtype(code: int) -> Any:
    import numpy as np

    npdt = DTYPES.get(code, (None, None, None))[1]
    itemsize = DTYPES.get(code, (None, None, None))[2]
    if npdt is None:  # bfloat16 / float8: bytes move as unsigned ints of the same width
        return np.dtype({2: "<u2", 1: "|u1"}[itemsize]) if itemsize in (1, 2) else None
    return np.dtype(npdt)
