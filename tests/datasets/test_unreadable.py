"""A real I/O error: the dataset lives on a btrfs image in which one data block of one file fails
its checksum, attached read-only and mounted ``ro``; the kernel returns EIO for that block only.
The audit, ``dataset verify`` and ``recover`` name the file and the offset of the bad block."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ckptrescue.datasets.audit import audit
from ckptrescue.datasets.manifest import build_manifest
from ckptrescue.datasets.recover import recover
from ckptrescue.datasets.verify import verify_dataset
from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from fixtures.datasets import flip_byte, tfrecord_offsets, truncate

VICTIM = "arrays/embeddings.npy"
BAD_OFFSET = 8192  # the third 4 KiB block of the .npy file
PARQUET = "tables/part-0.parquet"


def _parquet_chunk_start(path: Path) -> int:
    """Where row group 1's ``label`` column chunk starts (a block pyarrow must read)."""
    import pyarrow.parquet as pq

    col = pq.ParquetFile(path).metadata.row_group(1).column(1)
    return col.dictionary_page_offset or col.data_page_offset


@pytest.mark.privileged
@pytest.mark.needs_tool("mkfs.btrfs", "mount", "umount")
def test_every_kind_of_damage_on_a_read_only_mount(dataset, btrfs_with_bad_block,
                                                   tmp_path: Path, case) -> None:
    root, files = dataset
    src, _image, mount = btrfs_with_bad_block
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest)
    snaps = tmp_path / "snaps"
    shutil.copytree(root, snaps / "nightly")
    # damage: flipped byte, truncated shard, deleted file, new file; then the bad block
    flip_byte(files["tfrecord"], tfrecord_offsets(files["tfrecord"])[9] + 50)
    truncate(files["tar2"], 3000)
    files["jsonl"].unlink()
    (root / "text" / "new.jsonl").write_text('{"a": 1}\n')
    shutil.rmtree(src)
    shutil.copytree(root, src)
    pq_col = _parquet_chunk_start(files["parquet"])
    mnt = mount((VICTIM, BAD_OFFSET), (PARQUET, pq_col))
    before = tree_digest_safe(mnt)

    result = audit(mnt, manifest)
    record(case, from_library(result))  # the engine's one writer records it
    statuses = {r.rel.decode(): r for r in result.files if r.status != "ok"}
    assert {k: v.status for k, v in statuses.items()} == {
        "tfrecords/train-00000-of-00002.tfrecord": "corrupted",
        "shards/shard-000001.tar": "changed",
        "text/captions.jsonl": "missing",
        "text/new.jsonl": "new",
        VICTIM: "unreadable",
        PARQUET: "unreadable",
    }
    bad = statuses[VICTIM]
    assert bad.offset == BAD_OFFSET
    assert bad.to_json()["offset"] == BAD_OFFSET and bad.actual is None
    assert "Input/output error" in bad.reason
    assert result.counts["unreadable"] == 2
    assert statuses[PARQUET].offset == pq_col - pq_col % 4096

    checked = {f.rel.decode(): f for f in verify_dataset(mnt).files}
    npy = checked[VICTIM]
    assert npy.status == "unreadable" and npy.bad_records[0].offset == BAD_OFFSET
    assert checked["tfrecords/train-00000-of-00002.tfrecord"].bad_records[0].index == 9
    assert checked["shards/shard-000001.tar"].status == "damaged"
    pq = checked[PARQUET]
    assert pq.status == "unreadable", pq
    bad_block = pq_col - pq_col % 4096
    assert bad_block <= pq.bad_records[0].offset < bad_block + 4096

    rec = recover(mnt, manifest=manifest, source=snaps, to=tmp_path / "recovered")
    assert rec.ok
    assert {r.rel.decode() for r in rec.recovered} == {
        "tfrecords/train-00000-of-00002.tfrecord", "shards/shard-000001.tar",
        "text/captions.jsonl", VICTIM, PARQUET}
    assert tree_digest_safe(mnt) == before
    assert case.verify().ok


def tree_digest_safe(root: Path) -> str:
    """Digest of names, sizes and mtimes only (content of the bad file cannot be read)."""
    import hashlib
    import os

    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            st = (Path(dirpath) / name).lstat()
            h.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()

