"""Damaged `.index` files never crash the probe, and every flip in a checksummed block is seen."""

from __future__ import annotations

import random
from pathlib import Path

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.formats.tensorbundle import TensorBundleFormat
from fixtures import tensorflow as tfx
from fixtures.det import det_bytes


def test_random_index_damage_is_detected_without_crashing(copy_of) -> None:
    d = copy_of("run")
    index = d / "ckpt-1.index"
    pristine = index.read_bytes()
    rng = random.Random(4)
    blocks_end = len(pristine) - 48  # the footer's zero padding is not checksummed
    for _ in range(60):
        index.write_bytes(pristine)
        off = rng.randrange(len(pristine))
        tfx.flip(index, off, 1 << rng.randrange(8))
        report = TensorBundleFormat.probe(index, ProbeOptions(numeric=False))
        if off < blocks_end:
            assert report.verdict is not Verdict.INTACT, off
    for cut in (0, 10, 47, 48, 200, len(pristine) - 1):
        index.write_bytes(pristine[:cut])
        report = TensorBundleFormat.probe(index, ProbeOptions(numeric=False))
        assert report.verdict is Verdict.TRUNCATED, cut


def test_garbage_named_like_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "x.index").write_bytes(det_bytes(4096, 1))
    (tmp_path / "x.data-00000-of-00001").write_bytes(det_bytes(4096, 2))
    report = TensorBundleFormat.probe(tmp_path / "x.index", ProbeOptions())
    assert report.verdict is not Verdict.INTACT
    assert TensorBundleFormat.detect(tmp_path / "x.index")  # by name + shard: a damaged bundle


def test_random_hdf5_and_keras_damage_never_raises(tf_originals: Path, tmp_path: Path) -> None:
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    rng = random.Random(1)  # seed 1 once produced a dataset with an unrepresentable float type
    for i in range(60):
        src = tf_originals / rng.choice(["model.weights.h5", "legacy.h5", "model.keras"])
        data = bytearray(src.read_bytes())
        for _ in range(rng.randrange(1, 10)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        p = tmp_path / f"{i}{src.suffix}"
        p.write_bytes(bytes(data))
        (report,) = probe_paths([p])
        assert report.findings  # at least H5001, or the damage found
