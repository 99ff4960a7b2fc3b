"""TensorBundle probe verdicts on real TF checkpoints damaged in Python.

Originals: ``fixtures/tensorflow.py`` (tf.train.CheckpointManager run of a Keras model with Adam
state and a DT_STRING variable; a MaxShardSizePolicy-sharded save; a save whose kernel had
bit 30 of one element flipped before saving).
"""

from __future__ import annotations

import os
from pathlib import Path

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.formats.tensorbundle import TensorBundleFormat
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from fixtures import tensorflow as tfx

BN_VAR = "model/_functional/_operations/2/moving_variance/.ATTRIBUTES/VARIABLE_VALUE"


def probe(path: Path):  # noqa: ANN201
    return TensorBundleFormat.probe(path, ProbeOptions())


def record(report, name: str):  # noqa: ANN001, ANN201
    return next(t for t in report.tensors if t.name == name)


def codes(report) -> list[str]:  # noqa: ANN001
    return [f.code for f in report.findings]


def test_intact_run_verifies_every_tensor_including_strings(tf_originals: Path) -> None:
    reports = probe_paths([tf_originals / "run"])
    assert [Path(r.path).name for r in reports] == ["ckpt-1", "ckpt-2"]
    for r in reports:
        assert r.verdict is Verdict.INTACT and r.format == "tf-tensorbundle"
        assert r.findings == []
        names = set(tfx.reads(tf_originals, Path(r.path).name))
        assert {t.name for t in r.tensors} == names
        assert all(t.status == "ok" and t.checksum for t in r.tensors)
        assert record(r, "note/.ATTRIBUTES/VARIABLE_VALUE").dtype == "string"
        shard = str(tf_originals / "run" / f"{Path(r.path).name}.data-00000-of-00001")
        assert {t.file for t in r.tensors} == {shard}


def test_flipped_byte_names_exactly_that_variable(tf_originals: Path, copy_of) -> None:
    d = copy_of("run")
    rec = record(probe(tf_originals / "run" / "ckpt-1.index"), BN_VAR)
    tfx.flip(d / "ckpt-1.data-00000-of-00001", rec.offset + 5)
    r = probe(d / "ckpt-1.index")
    assert r.verdict is Verdict.DAMAGED
    assert r.damaged_tensors == [BN_VAR]
    assert codes(r) == ["TB002"]
    assert r.findings[0].offset == rec.offset and r.findings[0].length == rec.length
    assert "CRC32C mismatch" in r.findings[0].title
    assert sum(t.status == "ok" for t in r.tensors) == len(r.tensors) - 1


def test_two_flips_in_two_variables_are_both_named(tf_originals: Path, copy_of) -> None:
    d = copy_of("run")
    ref = probe(tf_originals / "run" / "ckpt-2.index")
    victims = [t for t in ref.tensors if t.dtype == "float32" and t.length and t.length >= 64][:2]
    for t in victims:
        tfx.flip(d / "ckpt-2.data-00000-of-00001", t.offset + t.length - 1, 0x80)
    r = probe(d / "ckpt-2.index")
    assert sorted(r.damaged_tensors) == sorted(t.name for t in victims)


def test_truncated_shard_names_the_cut_variables(tf_originals: Path, copy_of) -> None:
    d = copy_of("run")
    intact = probe(tf_originals / "run" / "ckpt-1.index")
    cut = 3000
    os.truncate(d / "ckpt-1.data-00000-of-00001", cut)
    r = probe(d / "ckpt-1.index")
    assert r.verdict is Verdict.TRUNCATED
    expected = {t.name for t in intact.tensors if t.offset + t.length > cut}
    assert set(r.missing_tensors) == expected and expected
    assert "TB004" in codes(r)
    for t in r.tensors:
        assert t.status == ("truncated" if t.name in expected else "ok")


def test_deleted_shard_is_incomplete(copy_of) -> None:
    d = copy_of("sharded")
    (d / "ckpt.data-00004-of-00013").unlink()
    r = probe(d / "ckpt.index")
    assert r.verdict is Verdict.INCOMPLETE
    tb003 = [f for f in r.findings if f.code == "TB003"]
    assert len(tb003) == 1 and tb003[0].evidence.endswith("ckpt.data-00004-of-00013")
    on_shard = {t.name for t in r.tensors if t.storage.startswith("shard 4/")}
    assert on_shard and set(tb003[0].tensors) == on_shard
    assert on_shard <= set(r.missing_tensors)


def test_deleted_index_is_an_interrupted_save(copy_of) -> None:
    d = copy_of("run")
    (d / "ckpt-2.index").unlink()
    reports = {Path(r.path).name: r for r in probe_paths([d])}
    r = reports["ckpt-2"]
    assert r.verdict is Verdict.INCOMPLETE
    assert "TB001" in codes(r)
    assert reports["ckpt-1"].verdict is Verdict.INTACT


def test_state_file_pointing_at_missing_prefix(copy_of) -> None:
    d = copy_of("run")
    state = d / "checkpoint"
    state.write_text(state.read_text().replace('model_checkpoint_path: "ckpt-2"',
                                               'model_checkpoint_path: "ckpt-3"'))
    reports = {Path(r.path).name: r for r in probe_paths([d])}
    assert set(reports) == {"ckpt-1", "ckpt-2", "ckpt-3"}
    missing = reports["ckpt-3"]
    assert missing.verdict is Verdict.INCOMPLETE
    assert "TC001" in codes(missing)
    assert reports["ckpt-2"].verdict is Verdict.INTACT
    from ckptrescue.checkpoints.rank import rank

    ranked = rank(d)
    assert [(Path(c.path).name, str(c.verdict)) for c in ranked.checkpoints] == [
        ("ckpt-3", "incomplete"), ("ckpt-2", "intact"), ("ckpt-1", "intact")]
    assert Path(ranked.resume_from).name == "ckpt-2"


def test_flipped_index_byte_recovers_entries_and_verifies_data(copy_of) -> None:
    d = copy_of("run")
    tfx.flip(d / "ckpt-1.index", 200, 0x10)
    r = probe(d / "ckpt-1.index")
    assert r.verdict is Verdict.DAMAGED
    assert "SS002" in codes(r)
    tb009 = next(f for f in r.findings if f.code == "TB009")
    assert len(r.tensors) == 25 and len(tb009.tensors) >= 24  # recovered; data CRC matches


def test_sliced_variables_verify_slices_and_skip_parents(tf_originals: Path, copy_of) -> None:
    r = probe(tf_originals / "sharded" / "ckpt.index")
    assert r.verdict is Verdict.INTACT
    sliced = [t for t in r.tensors if "slice[" in (t.storage or "")]
    assert sliced and all(t.status == "ok" for t in sliced)
    assert r.extra["variables"] == len(tfx.reads(tf_originals, "sharded"))
    victim = sliced[0]
    d = copy_of("sharded")
    tfx.flip(Path(str(d / Path(victim.file).name)), victim.offset)
    bad = probe(d / "ckpt.index")
    assert bad.verdict is Verdict.DAMAGED and bad.damaged_tensors == [victim.name]


def test_silent_exponent_flip_is_suspect_and_located(tf_originals: Path) -> None:
    r = probe(tf_originals / "poisoned" / "ckpt.index")
    assert r.verdict is Verdict.SUSPECT
    nm = [f for f in r.findings if f.code == "NM002"]
    assert len(nm) == 1 and len(r.suspect_tensors) == 1
    rec = record(r, r.suspect_tensors[0])
    assert nm[0].details["index"] == 3 * 16 + 5  # kernel[3, 5], flipped before the save
    assert nm[0].offset == rec.offset + 4 * (3 * 16 + 5)  # absolute offset in the shard
    assert nm[0].details.get("flip_bit", 30) == 30  # flip-back is the shared scan's heuristic


def test_interrupted_save_leftovers(copy_of) -> None:
    d = copy_of("run")
    (d / "ckpt-3_temp").mkdir()
    (d / "ckpt-3_temp" / "part-00000-of-00001.index").write_bytes(b"")
    (d / "ckpt-2.data-00000-of-00001.tempstate1234567").write_bytes(b"x")
    (d / "ckpt-4.data-00000-of-00001.tempstate7654321").write_bytes(b"y")
    reports = {Path(r.path).name: r for r in probe_paths([d])}
    for name in ("ckpt-3", "ckpt-4"):
        assert "TB008" in codes(reports[name]) and reports[name].verdict is Verdict.INCOMPLETE
    assert "TB008" in codes(reports["ckpt-2"])
    assert reports["ckpt-2"].verdict is Verdict.INTACT  # the finished save itself verifies


def test_reference_comparison_by_variable_name(tf_originals: Path, copy_of) -> None:
    d = copy_of("run")
    ref = tf_originals / "run" / "ckpt-1.index"
    (same,) = probe_paths([d / "ckpt-2.index"], reference=ref)
    assert not {"RF001", "RF002", "RF003"} & set(codes(same))
    (other,) = probe_paths([tf_originals / "many" / "ckpt.index"], reference=ref)
    rf001 = [f for f in other.findings if f.code == "RF001"]
    assert rf001 and BN_VAR in rf001[0].tensors


def test_reference_names_the_single_bit_flip(tf_originals: Path) -> None:
    (r,) = probe_paths([tf_originals / "poisoned"], reference=tf_originals / "clean")
    rf = [f for f in r.findings if f.code == "RF004"]
    kernel = "model/optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE"
    assert len(rf) == 1 and rf[0].tensors == (kernel,)
    assert rf[0].details["examples"][0]["bit"] == 30
    assert rf[0].details["examples"][0]["index"] == 3 * 16 + 5
    assert r.extra["reference"]["missing"] == 0 and r.verdict is Verdict.SUSPECT


def test_moved_run_with_absolute_state_paths(copy_of) -> None:
    d = copy_of("run")
    state = d / "checkpoint"
    state.write_text(state.read_text().replace('"ckpt-', '"/old/host/train/ckpt-'))
    reports = {Path(r.path).name: r for r in probe_paths([d])}
    assert set(reports) == {"ckpt-1", "ckpt-2"}
    tc4 = [f for f in reports["ckpt-2"].findings if f.code == "TC004"]
    assert len(tc4) == 1 and tc4[0].details["latest"] is True
    assert "/old/host/train/ckpt-2" in tc4[0].title
    assert reports["ckpt-2"].verdict is Verdict.INTACT  # the bytes are fine; TF won't find them


def test_variant_tensor_crc_rule(tf_originals: Path, copy_of) -> None:
    r = probe(tf_originals / "iterator" / "ckpt.index")
    state = next(t for t in r.tensors if t.dtype == "variant")
    assert r.verdict is Verdict.INTACT and state.status == "ok"
    d = copy_of("iterator")
    tfx.flip(d / "ckpt.data-00000-of-00001", state.offset + state.length // 2)
    bad = probe(d / "ckpt.index")
    assert bad.damaged_tensors == [state.name]
