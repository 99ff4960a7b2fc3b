"""Parquet and Arrow IPC (file or stream) shards, read in record batches with pyarrow.

Rows come out batch by batch (:data:`BATCH_ROWS` rows at a time), so memory is bounded by one
batch whatever the file size. pyarrow is the ``[data]`` extra, imported when a shard needs it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO, Any

from ckptrescue.datasets.profiles.values import flatten
from ckptrescue.errors import optional_module

BATCH_ROWS = 1024
ARROW_MAGIC = b"ARROW1"


def _pyarrow() -> Any:
    with optional_module("profiling Parquet/Arrow needs pyarrow",
                         hint="pip install 'ckptrescue[data]'"):
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet  # noqa: F401
    return pyarrow


def arrow_types(schema: Any) -> dict[str, str]:
    return {f.name: str(f.type) for f in schema}


def parquet_batches(fh: IO[bytes], columns: Sequence[str] | None) -> Iterator[Any]:
    """The Parquet file's Arrow record batches (``columns``: only those top-level columns)."""
    pa = _pyarrow()
    pf = pa.parquet.ParquetFile(fh)
    names = set(pf.schema_arrow.names)
    cols = [c for c in columns if c in names] if columns is not None else None
    yield from pf.iter_batches(batch_size=BATCH_ROWS, columns=cols, use_threads=False)


def iter_parquet(fh: IO[bytes], columns: Sequence[str] | None) -> Iterator[dict[str, Any]]:
    for batch in parquet_batches(fh, columns):
        for row in batch.to_pylist():
            yield flatten(row)


def iter_arrow(fh: IO[bytes], columns: Sequence[str] | None) -> Iterator[dict[str, Any]]:
    for batch in arrow_batches(fh, columns):
        for row in batch.to_pylist():
            yield flatten(row)


def arrow_batches(fh: IO[bytes], columns: Sequence[str] | None) -> Iterator[Any]:
    """The Arrow IPC file's (or stream's) record batches."""
    pa = _pyarrow()
    head = fh.read(6)
    fh.seek(0)
    reader = pa.ipc.open_file(fh) if head == ARROW_MAGIC else pa.ipc.open_stream(fh)
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) \
        if head == ARROW_MAGIC else iter(reader)
    for batch in batches:
        if columns is not None:
            keep = [c for c in columns if c in batch.schema.names]
            batch = batch.select(keep)
        yield batch
