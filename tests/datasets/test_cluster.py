"""--scheduler: a real Dask LocalCluster with two worker processes gives the local run's results."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptrescue.datasets.audit import audit
from ckptrescue.datasets.cluster import batches
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


def test_without_dask_the_option_says_how_to_install_it(dataset, tmp_path: Path) -> None:
    root, _ = dataset
    code = (
        "import sys; sys.modules['distributed'] = None\n"
        "sys.argv = ['ckptrescue', 'manifest', 'build', sys.argv[1], '-o', sys.argv[2],"
        " '--scheduler', 'tcp://127.0.0.1:1', '--no-progress']\n"
        "from ckptrescue.cli.main import main; main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(root), str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, CKPTRESCUE_DEBUG=""))
    assert proc.returncode == 4
    assert "needs Dask distributed" in proc.stderr
    assert "pip install 'ckptrescue[cluster]'" in proc.stderr
    assert "Traceback" not in proc.stderr
