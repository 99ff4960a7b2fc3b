"""SavedModel, Keras ``.keras`` and HDF5 weights files written by tensorflow-cpu / keras 3."""

from __future__ import annotations

import os
from pathlib import Path

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from fixtures import tensorflow as tfx


def codes(report) -> list[str]:  # noqa: ANN001
    return [f.code for f in report.findings]


def test_savedmodel_intact_with_fingerprint(tf_originals: Path) -> None:
    (r,) = probe_paths([tf_originals / "savedmodel"])
    assert r.format == "tf-savedmodel" and r.verdict is Verdict.INTACT, r.findings
    assert r.extra["checkpoint_hash"] == r.extra["index_fingerprint64"]
    assert {t.name for t in r.tensors} == set(tfx.reads(tf_originals, "savedmodel"))


def test_savedmodel_flipped_variable_byte(tf_originals: Path, copy_of) -> None:
    (intact,) = probe_paths([tf_originals / "savedmodel"])
    victim = max(intact.tensors, key=lambda t: t.length or 0)
    d = copy_of("savedmodel")
    tfx.flip(d / "variables" / "variables.data-00000-of-00001", victim.offset + 100)
    (r,) = probe_paths([d])
    assert r.verdict is Verdict.DAMAGED and r.damaged_tensors == [victim.name]
    assert "SD002" not in codes(r)  # the index did not change


def test_savedmodel_index_change_breaks_fingerprint(copy_of) -> None:
    d = copy_of("savedmodel")
    tfx.flip(d / "variables" / "variables.index", 100, 0x02)
    (r,) = probe_paths([d])
    assert {"SS002", "SD002"} <= set(codes(r)) and r.verdict is Verdict.DAMAGED


def test_savedmodel_without_variables(copy_of) -> None:
    d = copy_of("savedmodel")
    for p in (d / "variables").iterdir():
        p.unlink()
    (d / "variables").rmdir()
    (r,) = probe_paths([d])
    assert r.verdict is Verdict.INCOMPLETE and "SD004" in codes(r)


def test_keras_archive_intact(tf_originals: Path) -> None:
    (r,) = probe_paths([tf_originals / "model.keras"])
    assert r.format == "keras" and r.verdict is Verdict.INTACT
    assert len(r.tensors) == 22 and all(t.status == "ok" for t in r.tensors)
    assert "layers/dense/vars/0" in {t.name for t in r.tensors}


def test_keras_flipped_exponent_bit(tf_originals: Path, copy_of) -> None:
    (intact,) = probe_paths([tf_originals / "model.keras"])
    kernel = next(t for t in intact.tensors if t.name == "layers/dense/vars/0")
    p = copy_of("model.keras")
    tfx.flip(p, kernel.offset + 4 * 7 + 3, 0x40)  # bit 30 of element 7
    (r,) = probe_paths([p])
    assert r.verdict is Verdict.DAMAGED
    assert "KR001" in codes(r)
    nm = next(f for f in r.findings if f.code == "NM002")
    assert r.suspect_tensors == ["layers/dense/vars/0"] and nm.details["index"] == 7
    assert all(t.status == "unverified" for t in r.tensors if t.name != kernel.name)


def test_keras_truncated(copy_of) -> None:
    p = copy_of("model.keras")
    os.truncate(p, p.stat().st_size // 2)
    (r,) = probe_paths([p])
    assert r.format == "keras" and r.verdict is Verdict.TRUNCATED


def test_weights_h5_and_legacy_h5(tf_originals: Path) -> None:
    reports = {Path(r.path).name: r for r in probe_paths(
        [tf_originals / "model.weights.h5", tf_originals / "legacy.h5"])}
    for r in reports.values():
        assert r.format == "keras-h5" and r.verdict is Verdict.INTACT
        assert codes(r) == ["H5001"]  # "HDF5 stores no checksums", said once
        assert len(r.tensors) == 22 and all(t.offset is not None for t in r.tensors)
    assert reports["legacy.h5"].extra["legacy"] is True
    assert reports["legacy.h5"].extra["attrs"]["backend"] == "tensorflow"


def test_h5_dataset_offsets_point_at_the_values(tf_originals: Path) -> None:
    import h5py
    import numpy as np

    (r,) = probe_paths([tf_originals / "model.weights.h5"])
    with h5py.File(tf_originals / "model.weights.h5", "r") as h5, \
            (tf_originals / "model.weights.h5").open("rb") as fh:
        for t in r.tensors:
            fh.seek(t.offset)
            assert fh.read(t.length) == np.ascontiguousarray(h5[t.name][()]).tobytes()


def test_savedmodel_pb_damaged_or_missing(copy_of) -> None:
    d = copy_of("savedmodel")
    pb = d / "saved_model.pb"
    data = bytearray(pb.read_bytes())
    data[0] = 0x07  # field 0, wire type 7: not a protobuf any more
    pb.write_bytes(bytes(data))
    (r,) = probe_paths([d])
    assert r.verdict is Verdict.DAMAGED and "SD005" in codes(r)
    pb.unlink()
    (r,) = probe_paths([d])  # still recognised from variables/ + fingerprint.pb
    assert r.format == "tf-savedmodel" and "SD001" in codes(r)
    assert r.verdict is Verdict.INCOMPLETE


def test_keras_sharded_weights(tf_originals: Path, copy_of) -> None:
    (r,) = probe_paths([tf_originals / "keras_sharded"])
    assert r.format == "keras-sharded" and r.verdict is Verdict.INTACT
    assert r.extra["shards"] >= 2 and len(r.tensors) == 22
    d = copy_of("keras_sharded")
    shard = sorted(d.glob("*_0000*.weights.h5"))[-1]
    in_shard = {t.name.rsplit("/", 1)[0] for t in r.tensors if Path(t.file).name == shard.name}
    shard.unlink()
    (bad,) = probe_paths([d])
    assert bad.verdict is Verdict.INCOMPLETE and "KR005" in codes(bad)
    assert set(bad.missing_tensors) == in_shard
