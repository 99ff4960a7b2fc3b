"""Read a probed checkpoint's tensors and scalars as numbers, streaming and statically.

``open_checkpoint(path)`` probes the checkpoint (static: nothing executed) and returns a
:class:`CheckpointValues`: the verified tensors by name, ``chunks(name, n)`` yielding float64
numpy chunks of at most ``n`` elements in C order (with the raw bytes, for bit-identity), and
``scalars``: numbers the checkpoint stores outside tensors (``optimizer.param_groups.0.lr``,
``lr_scheduler.last_epoch``, ``global_step``) read from the torch pickle by the static scanner,
plus one-element tensors (Adam's ``step``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord
from ckptrescue.checkpoints.formats import dtypes

READABLE = ("ok", "unverified", "suspect")
MAX_STRIDED_BYTES = 256 * 1024 * 1024  # a non-contiguous view is read whole: bound it
_WIDE = {1: "u1", 2: "u2", 4: "u4", 8: "u8"}


@dataclass
class CheckpointValues:
    path: str
    report: CheckpointReport
    fmt: Any
    root: Path
    tensors: dict[str, TensorRecord] = field(default_factory=dict)
    scalars: dict[str, float] = field(default_factory=dict)
    step: int | None = None

    def numel(self, name: str) -> int:
        rec = self.tensors[name]
        n = 1
        for s in rec.shape or ():
            n *= s
        return n

    def chunks(self, name: str, n: int) -> Iterator[tuple[Any, bytes]]:
        """(float64 values, raw little-endian bytes) in chunks of at most ``n`` elements."""
        import numpy as np

        rec = self.tensors[name]
        info = dtypes.lookup(rec.dtype)
        assert info is not None
        for raw in self._raw(rec, info, n * info.itemsize):
            yield _as_float64(np, raw, info), raw

    def _raw(self, rec: TensorRecord, info: dtypes.DType, step: int) -> Iterator[bytes]:
        import numpy as np

        total = self.numel(rec.name) * info.itemsize
        reader = getattr(self.fmt, "read_tensor_bytes", None)
        strides = self.report.extra.get("strides", {}).get(rec.name)
        big = self.report.extra.get("byteorder") == "big"
        if reader is not None and (rec.file is None or rec.offset is None):
            pending = b""
            for block in reader(self.root, self.report, rec):
                pending += block
                while len(pending) >= step:
                    yield pending[:step]
                    pending = pending[step:]
            if pending:
                yield pending
            return
        assert rec.file is not None and rec.offset is not None
        with open(rec.file, "rb") as fh:
            if strides is None:
                done = 0
                while done < total:
                    data = os.pread(fh.fileno(), min(step, total - done), rec.offset + done)
                    if not data:
                        raise OSError(f"{rec.file}: short read at {rec.offset + done}")
                    yield _swap(np, data, info) if big else data
                    done += len(data)
                return
            length = rec.length or 0
            if length > MAX_STRIDED_BYTES:
                raise OSError(f"{rec.name}: a strided view of {length} bytes is not compared")
            raw = os.pread(fh.fileno(), length, rec.offset)
            base = np.frombuffer(raw, dtype=_WIDE.get(info.itemsize, "u1"))
            view = np.lib.stride_tricks.as_strided(
                base, shape=rec.shape, strides=[s * base.itemsize for s in strides])
            data = np.ascontiguousarray(view).tobytes()
            data = _swap(np, data, info) if big else data
            for i in range(0, len(data), step):
                yield data[i:i + step]


def _swap(np: Any, data: bytes, info: dtypes.DType) -> bytes:
    size = info.itemsize // 2 if info.kind == "complex" else info.itemsize
    if size == 1:
        return data
    code = _WIDE[size]
    return np.frombuffer(data, dtype=">" + code).astype("<" + code).tobytes()


def _as_float64(np: Any, raw: bytes, info: dtypes.DType) -> Any:
    if info.name == "bfloat16":
        wide = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return wide.view(np.float32).astype(np.float64)
    if info.kind == "complex" and info.numpy:
        return np.abs(np.frombuffer(raw, dtype="<" + info.numpy)).astype(np.float64)
    assert info.numpy is not None
    return np.frombuffer(raw, dtype="<" + info.numpy if info.itemsize > 1 else info.numpy
                         ).astype(np.float64)


def comparable(rec: TensorRecord) -> bool:
    info = dtypes.lookup(rec.dtype)
    return (rec.status in READABLE and rec.shape is not None and info is not None
            and (info.numpy is not None or info.name == "bfloat16")
            and info.kind in ("float", "int", "complex"))


def open_checkpoint(fmt: Any, root: Path) -> CheckpointValues:
    """Probe the checkpoint at ``root`` statically; index its comparable tensors and scalars."""
    from ckptrescue.checkpoints.probes.single import probe_one
    from ckptrescue.checkpoints.rank import step_of

    report = probe_one(fmt, root, ProbeOptions(numeric=False))
    values = CheckpointValues(str(root), report, fmt, root, step=step_of(Path(root).name))
    for rec in report.tensors:
        if comparable(rec):
            values.tensors[rec.name] = rec
    values.scalars = dict(pickle_scalars(report))
    for name, rec in values.tensors.items():
        if rec.shape is not None and values.numel(name) == 1:
            for chunk, _raw in values.chunks(name, 1):
                values.scalars[name] = float(chunk[0])
    step = next((int(values.scalars[k]) for k in ("global_step", "step", "iteration",
                                                   "global_steps", "epoch_step")
                 if k in values.scalars), None)
    if step is not None:
        values.step = step
    return values


def pickle_scalars(report: CheckpointReport, limit: int = 100_000) -> Iterator[tuple[str, float]]:
    """Numbers stored in a torch zip's ``data.pkl`` outside tensors, by dotted name."""
    if report.format != "torch-zip":
        return
    from ckptrescue.checkpoints.formats import pickle_scan, zipwalk

    with open(report.path, "rb") as fh:
        layout = zipwalk.read_central(fh)
        if layout is None:
            return
        rec = next((r for r in layout.records if r.name.endswith("data.pkl")
                    and r.name.count("/") == 1), None)
        if rec is None or rec.data_offset is None or rec.method != 0 or not rec.compressed_size:
            return
        data = zipwalk.pread(fh, rec.data_offset, rec.compressed_size)
    try:
        scan = pickle_scan.scan_pickle(data)
    except pickle_scan.PickleError:
        return
    yield from _walk_numbers(scan.root, limit)


def _walk_numbers(root: Any, limit: int) -> Iterator[tuple[str, float]]:
    from ckptrescue.checkpoints.formats import pickle_scan

    todo: list[tuple[str, Any, int]] = [("", root, 0)]
    seen: set[int] = set()
    visited = 0
    while todo and visited < limit:
        path, obj, depth = todo.pop()
        visited += 1
        if isinstance(obj, bool):
            continue
        if isinstance(obj, (int, float)):
            if path:
                yield path, float(obj)
            continue
        if depth > 32 or isinstance(obj, (pickle_scan.TensorRef, pickle_scan.PersistentRef)):
            continue
        if isinstance(obj, (dict, list, tuple)):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            for k, v in items:
                if isinstance(k, (str, int)) and not isinstance(k, bool):
                    todo.append((f"{path}.{k}" if path else str(k), v, depth + 1))
