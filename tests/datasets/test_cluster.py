"""--scheduler: a real Dask LocalCluster with two worker processes gives the local run's results."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptrescue.datasets.audit import audit
from ckptrescue.datasets.cluster import (
    MAX_BATCH_BYTES,
    MAX_BATCH_FILES,
    MIN_BATCH_BYTES,
    batch_bytes,
    batches,
    plan_batches,
)
from ckptrescue.datasets.manifest import build_manifest, sidecar_path
from ckptrescue.datasets.verify import verify_dataset
from ckptrescue.datasets.walk import FileEntry
from fixtures.datasets import flip_byte, tfrecord_offsets, truncate


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       memory_limit="1GiB")
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def test_cluster_results_equal_the_local_run(dataset, tmp_path: Path, scheduler: str) -> None:
    root, files = dataset
    local = build_manifest(root, tmp_path / "local.sha256", jobs=2)
    remote = build_manifest(root, tmp_path / "remote.sha256", scheduler=scheduler)
    assert (tmp_path / "local.sha256").read_bytes() == (tmp_path / "remote.sha256").read_bytes()
    assert (sidecar_path(tmp_path / "local.sha256").read_bytes()
            == sidecar_path(tmp_path / "remote.sha256").read_bytes())
    assert remote.scheduler == scheduler and len(remote.entries) == len(local.entries)

    flip_byte(files["tfrecord"], tfrecord_offsets(files["tfrecord"])[4] + 13)
    truncate(files["tar"], 5000)
    files["npy"].unlink()
    a_local = audit(root, tmp_path / "local.sha256").to_json()
    a_remote = audit(root, tmp_path / "local.sha256", scheduler=scheduler).to_json()
    assert a_remote == a_local
    assert a_local["counts"]["corrupted"] == 1 and a_local["counts"]["changed"] == 1

    v_local = verify_dataset(root).to_json()
    v_remote = verify_dataset(root, scheduler=scheduler).to_json()
    assert v_remote == v_local
    assert v_local["counts"]["damaged"] == 2


def test_batches_split_by_count_and_bytes() -> None:
    entries = [FileEntry(f"f{i}".encode(), 100, 0) for i in range(10)]
    assert [len(b) for b in batches(entries, max_bytes=350, max_files=100)] == [3, 3, 3, 1]
    assert [len(b) for b in batches(entries, max_bytes=10**9, max_files=4)] == [4, 4, 2]


MiB, GiB, TiB, PB = 1 << 20, 1 << 30, 1 << 40, 10**15


def _same_files_in_walk_order(entries: list[FileEntry], plan: list[list[FileEntry]]) -> None:
    """Every file in exactly one batch, in walk order inside it (batches are contiguous runs)."""
    flat = [e for b in plan for e in b]
    assert len(flat) == len(entries) and set(flat) == set(entries)
    index = {e: i for i, e in enumerate(entries)}
    for b in plan:
        assert [index[e] for e in b] == list(range(index[b[0]], index[b[0]] + len(b)))


def test_batch_size_comes_from_total_bytes_and_threads() -> None:
    # 512 MiB on 2 threads: 16 batches would be 32 MiB, under the floor
    assert batch_bytes(512 * MiB, 2) == MIN_BATCH_BYTES == 64 * MiB
    # 1 TiB on 16 threads: 128 batches of 8 GiB -> the 2 GiB ceiling
    assert batch_bytes(TiB, 16) == MAX_BATCH_BYTES == 2 * GiB
    # 100 GiB on 64 threads: 512 batches of 200 MiB
    assert batch_bytes(100 * GiB, 64) == 200 * MiB
    # 5 PB on 1000 threads (the capacity plan): the ceiling, ~2.3 million batches
    assert batch_bytes(5 * PB, 1000) == 2 * GiB
    assert batch_bytes(0, 0) == MIN_BATCH_BYTES


def test_plan_splits_by_bytes_not_by_file_count() -> None:
    # 10 GiB in 300 files of varied sizes (4 MiB .. 64 MiB) on 8 threads: 160 MiB batches
    sizes = [(4 + (i * 37) % 61) * MiB for i in range(300)]
    entries = [FileEntry(f"shard-{i:04d}".encode(), size, 0) for i, size in enumerate(sizes)]
    target = batch_bytes(sum(sizes), 8)
    plan = plan_batches(entries, 8)
    _same_files_in_walk_order(entries, plan)
    totals = [sum(e.size for e in b) for b in plan]
    assert max(totals) <= target
    # full batches: each batch stops only because the next file would not fit
    assert all(t + entries[entries.index(b[-1]) + 1].size > target
               for t, b in zip(totals, plan, strict=True) if b[-1] is not entries[-1])
    # several batches per thread, file counts differ, bytes do not differ much
    assert len(plan) >= 8 * 4
    assert len({len(b) for b in plan}) > 1
    assert min(totals[:-1]) > target * 0.6
    assert totals == sorted(totals, reverse=True)


def test_huge_files_are_batches_of_their_own_and_start_first() -> None:
    entries = [FileEntry(f"small-{i}".encode(), 3 * MiB, 0) for i in range(100)]
    entries.insert(40, FileEntry(b"model-00001.safetensors", 50 * GiB, 0))
    entries.insert(70, FileEntry(b"model-00002.safetensors", 9 * GiB, 0))
    plan = plan_batches(entries, 4)  # 59.3 GiB / 32 -> 1.85 GiB batches
    _same_files_in_walk_order(entries, plan)
    assert [b[0].rel for b in plan[:2]] == [b"model-00001.safetensors",
                                          b"model-00002.safetensors"]
    assert [len(b) for b in plan[:2]] == [1, 1]  # a whole-file SHA-256 is not split


def test_many_tiny_files_are_grouped_by_bytes_up_to_the_file_cap() -> None:
    # 120,000 files of 1 KiB (117 MiB) on 4 threads: the 64 MiB floor holds 65,536 of them, the
    # safety cap keeps a batch (and its result) to MAX_BATCH_FILES files
    entries = [FileEntry(b"t/%07d.json" % i, 1024, 0) for i in range(120_000)]
    plan = plan_batches(entries, 4)
    _same_files_in_walk_order(entries, plan)
    assert [len(b) for b in plan] == [MAX_BATCH_FILES] * 12
    # 4, 8 and 12 KiB files (234 MiB): 16 MiB batches of 2,048 files, the bytes bind first
    entries = [FileEntry(b"u/%07d" % i, 4096 * (1 + i % 3), 0) for i in range(30_000)]
    plan = plan_batches(entries, 4, floor=16 * MiB, max_files=MAX_BATCH_FILES)
    _same_files_in_walk_order(entries, plan)
    assert all(sum(e.size for e in b) <= 16 * MiB for b in plan)
    assert max(len(b) for b in plan) == 2048 and len(plan) == 15


def test_without_dask_the_option_says_how_to_install_it(dataset, tmp_path: Path) -> None:
    root, _ = dataset
    code = (
        "import sys; sys.modules['distributed'] = None\n"
        "sys.argv = ['ckptrescue', 'manifest', 'build', sys.argv[1], '-o', sys.argv[2],"
        " '--scheduler', 'tcp://127.0.0.1:1', '--no-progress']\n"
        "from ckptrescue.cli.process import main; main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(root), str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, CKPTRESCUE_DEBUG=""))
    assert proc.returncode == 4
    assert "needs Dask distributed" in proc.stderr
    assert "pip install 'ckptrescue[cluster]'" in proc.stderr
    assert "Traceback" not in proc.stderr
