"""The Dask path gives exactly the local path's profile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptrescue.datasets.profiles.build import profile_dataset


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                       protocol="tcp", host="127.0.0.1",
                                       dashboard_address=None)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def test_cluster_profile_equals_the_local_profile(incident_root: Path, scheduler: str) -> None:
    local = profile_dataset(incident_root / "labels", tokenizer="whitespace")
    remote = profile_dataset(incident_root / "labels", tokenizer="whitespace",
                             scheduler=scheduler)
    assert remote.dumps() == local.dumps()
    assert len(remote.shards) == 8
