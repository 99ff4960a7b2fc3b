"""Profile shards: :func:`profile_shard` (one file), :func:`profile_dataset` (many, locally on
threads or on a Dask cluster). A shard's profile is a pure function of its bytes and the options,
so the cluster path returns exactly what the local path does; merging happens on the caller.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ckptrescue.datasets.profiles import arrays, batch
from ckptrescue.datasets.profiles.minhash import NearDup
from ckptrescue.datasets.profiles.profile import DatasetProfile, ProfileOptions, ShardProfile
from ckptrescue.datasets.profiles.readers import FORMATS, ReadState, open_records, shard_format
from ckptrescue.datasets.profiles.sketches import DupSample
from ckptrescue.datasets.profiles.tokens import TokenCounter, Tokenizer, describe, resolve
from ckptrescue.datasets.profiles.values import ROOT_FIELD
from ckptrescue.datasets.profiles.vector import add_rows
from ckptrescue.datasets.shardcheck import UnreadableAt
from ckptrescue.datasets.walk import FileEntry, join, to_json_path, walk
from ckptrescue.errors import EvidenceError, UsageError


def profile_shard(path: str | os.PathLike[str] | bytes, *, fields: Sequence[str] | None = None,
                  tokenizer: Tokenizer | None = None, sample: int | None = None,
                  name: str | None = None) -> ShardProfile:
    """Profile one shard, streaming.

    ``fields`` limits the profile (and the record hash) to those fields; ``tokenizer`` (a
    callable or a Hugging Face tokenizer name) adds token counts of text fields; ``sample``
    profiles only the first ``sample`` records. ``name`` is how the profile names the shard
    (default: the path).
    """
    raw = os.fsencode(path)
    options = ProfileOptions(tuple(fields) if fields is not None else None, describe(tokenizer),
                             sample)
    prof = ShardProfile(path=name if name is not None else os.fsdecode(raw), options=options)
    try:
        prof.size = os.stat(raw).st_size
    except OSError as exc:
        raise EvidenceError(f"{os.fsdecode(raw)}: {exc.strerror}") from exc
    builder = _Builder(prof, resolve(tokenizer), set(fields) if fields is not None else None,
                       sample)
    state = ReadState()
    try:
        for item in open_records(raw, state, fields=fields, batches=True):
            if not builder.add(item):
                break
    except UnreadableAt as exc:
        state.stopped = f"I/O error at offset {exc.offset}: {exc.error}"
    builder.finish()
    prof.format = state.format
    prof.unparsed = state.unparsed
    if state.stopped:
        prof.complete = False
        prof.note = state.stopped
    elif state.unparsed:
        prof.note = f"{state.unparsed} record(s) did not parse and are not profiled"
    return prof


class _Builder:
    """Adds records to a shard profile in blocks of :data:`~.batch.BATCH_RECORDS` (a fixed
    count, so the blocks, and the profile, depend only on the shard's records)."""

    def __init__(self, prof: ShardProfile, tokens: TokenCounter | None,
                 fields: set[str] | None, sample: int | None) -> None:
        self.prof = prof
        self.tokens = tokens
        self.fields = fields
        self.limit = sample
        self.dups = DupSample()
        self.near = NearDup()
        self.pending: list[Any] = []
        self.raw = False  # pending holds parsed JSON values (not flattened)
        self.arrow: list[Any] = []  # Arrow record batches not profiled yet
        self.arrow_rows = 0

    def add(self, item: Any) -> bool:
        """Profile one record (or a block of records or array rows); False when the sample is
        complete."""
        if isinstance(item, batch.ArrowBatch):
            return self._arrow(item.batch)
        self._arrow_flush()
        if isinstance(item, arrays.ArrayChunk):
            return self._chunk(item)
        if isinstance(item, batch.JsonBlock):
            return self._block(item.values)
        if self.raw:
            self._flush()
        if self.limit is not None and self.prof.records >= self.limit:
            return False
        self.prof.records += 1
        self.pending.append(item)
        if len(self.pending) >= batch.BATCH_RECORDS:
            self._flush()
        return True

    def _block(self, values: list[Any]) -> bool:
        if not self.raw:
            self._flush()
            self.raw = True
        if self.limit is not None:
            left = self.limit - self.prof.records
            if left <= 0:
                return False
            values = values[:left]
        self.prof.records += len(values)
        self.pending.extend(values)
        while len(self.pending) >= batch.BATCH_RECORDS:  # blocks of a fixed record count
            self._flush(batch.BATCH_RECORDS)
        return True

    def _flush(self, count: int | None = None) -> None:
        if count is None:
            records, self.pending = self.pending, []
        else:
            records, self.pending = self.pending[:count], self.pending[count:]
        raw = self.raw
        if count is None:
            self.raw = False
        if not records:
            return
        hashes, columns = batch.profile_records(self.prof, records, self.tokens, raw,
                                                self.fields)
        self._hashes(hashes)
        if not self.near.full:
            self.near.add_many([t for t in batch.texts_of(columns, len(records)) if t])

    def _hashes(self, hashes: Any) -> None:
        self.dups.add_many(hashes)
        self.prof.record_hashes.add_many(hashes)

    def _arrow(self, rb: Any) -> bool:
        """Queue an Arrow record batch; blocks of exactly BATCH_RECORDS rows are profiled (the
        reader's batch sizes do not change the profile)."""
        self._flush()
        if self.limit is not None:
            left = self.limit - self.prof.records - self.arrow_rows
            if left <= 0:
                return False
            if rb.num_rows > left:
                rb = rb.slice(0, left)
        if rb.num_rows:
            self.arrow.append(rb)
            self.arrow_rows += rb.num_rows
        while self.arrow_rows >= batch.BATCH_RECORDS:
            self._arrow_flush(batch.BATCH_RECORDS)
        return True

    def _arrow_flush(self, count: int | None = None) -> None:
        if not self.arrow_rows:
            return
        import pyarrow as pa

        table = pa.Table.from_batches(self.arrow)
        count = self.arrow_rows if count is None else count
        block = table.slice(0, count).combine_chunks()
        rest = table.slice(count)
        self.arrow = rest.combine_chunks().to_batches() if rest.num_rows else []
        self.arrow_rows = rest.num_rows
        rbs = block.to_batches()
        rb = rbs[0] if len(rbs) == 1 else pa.RecordBatch.from_pylist([], schema=block.schema)
        self._arrow_block(rb)

    def _arrow_block(self, rb: Any) -> None:
        n = rb.num_rows
        done = batch.profile_arrow(self.prof, rb, self.fields, self.tokens)
        if done is None:  # the row path, as one block
            self._flush()
            self.pending = batch.rows_of(rb)
            self.prof.records += n
            self._flush()
            return
        self.prof.records += n
        hashes, texts = done
        self._hashes(hashes)
        if not self.near.full:
            normalised = batch.arrow_normalised_texts(texts)
            if normalised is not None:
                self.near.add_normalised(*normalised)
            else:
                self.near.add_many([t for t in batch.arrow_texts(texts, n) if t])

    def _chunk(self, chunk: arrays.ArrayChunk) -> bool:
        rows = chunk.rows
        if self.limit is not None:
            left = self.limit - self.prof.records
            if left <= 0:
                return False
            rows = rows[:left]
        if rows.dtype.names:  # structured: one field per named member, row by row
            for row in rows.tolist():
                self.add(dict(zip(rows.dtype.names, row, strict=True)))
            return True
        import numpy as np

        self._flush()
        n = int(rows.shape[0])
        self.prof.records += n
        add_rows(self.prof.field_stats(ROOT_FIELD), rows)
        self._hashes(np.array(arrays.row_hashes(rows), dtype=np.uint64))
        return True

    def finish(self) -> None:
        self._flush()
        self._arrow_flush()
        self.near.finish()
        self.prof.dup_sampled = self.dups.sampled
        self.prof.dup_count = self.dups.duplicates
        self.prof.near_checked = self.near.checked
        self.prof.near_count = self.near.near


def _profile_entry(root: bytes, entry: FileEntry, *, fields: Sequence[str] | None,
                   tokenizer: Tokenizer | None, sample: int | None) -> ShardProfile:
    return profile_shard(join(root, entry.rel), fields=fields, tokenizer=tokenizer,
                         sample=sample, name=to_json_path(entry.rel))


def profile_files(root: bytes, entries: list[FileEntry], *, fields: Sequence[str] | None = None,
                  tokenizer: Tokenizer | None = None,
                  sample: int | None = None) -> list[ShardProfile]:
    """Profile a batch of files under ``root`` (the unit of work of a cluster worker)."""
    return [_profile_entry(root, e, fields=fields, tokenizer=tokenizer, sample=sample)
            for e in entries]


def is_shard(name: bytes | str, head: bytes) -> bool:
    """True when a file is of a profiled format (by name and first bytes)."""
    import io

    fmt, _ = shard_format(name, head, io.BytesIO(head))
    return fmt in FORMATS


def _select(root: bytes, entries: Iterable[FileEntry]) -> list[FileEntry]:
    out = []
    for e in entries:
        try:
            with open(join(root, e.rel), "rb") as fh:
                head = fh.read(512)
        except OSError:
            out.append(e)  # profile_shard says what is wrong with it
            continue
        if is_shard(e.rel, head):
            out.append(e)
    return out


def _entries(paths_or_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
             ) -> tuple[bytes, list[FileEntry]]:
    if isinstance(paths_or_dir, str | os.PathLike):
        root = Path(paths_or_dir)
        if not root.is_dir():
            raise EvidenceError(f"{root}: not a directory")
        root_b = os.fsencode(root)
        return root_b, _select(root_b, walk(root).files)
    paths = [os.path.abspath(os.fsencode(p)) for p in paths_or_dir]
    if not paths:
        raise UsageError("no shards to profile")
    root_b = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])
    if os.path.isfile(root_b):
        root_b = os.path.dirname(root_b)
    entries = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as exc:
            raise EvidenceError(f"{os.fsdecode(p)}: {exc.strerror}") from exc
        entries.append(FileEntry(os.path.relpath(p, root_b), st.st_size, st.st_mtime_ns))
    return root_b, entries


def profile_dataset(paths_or_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
                    jobs: int = 1, scheduler: str | None = None,
                    fields: Sequence[str] | None = None, tokenizer: Tokenizer | None = None,
                    sample: int | None = None,
                    progress: Callable[[ShardProfile], None] | None = None) -> DatasetProfile:
    """Profile every shard under a directory (files of a profiled format), or the given files.

    ``jobs`` threads locally, or ``scheduler`` (a Dask address, the ``[cluster]`` extra): each
    worker profiles whole files where they live (a shared filesystem), as ``dataset verify`` does.
    ``tokenizer`` must be picklable for a cluster (a name is). Shard names are relative to the
    directory (or to the files' common directory).
    """
    root_b, entries = _entries(paths_or_dir)
    options = ProfileOptions(tuple(fields) if fields is not None else None, describe(tokenizer),
                             sample)
    result = DatasetProfile(root=os.fsdecode(root_b), options=options)
    work = functools.partial(profile_files, fields=fields, tokenizer=tokenizer, sample=sample)
    if scheduler:
        from ckptrescue.datasets.cluster import map_batches

        for batch in map_batches(scheduler, work, root_b, entries):
            for prof in batch:
                result.shards.append(prof)
                if progress:
                    progress(prof)
    else:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for prof in pool.map(lambda e: work(root_b, [e])[0], entries):
                result.shards.append(prof)
                if progress:
                    progress(prof)
    result.shards.sort(key=lambda s: s.path)
    return result
