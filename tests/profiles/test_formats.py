"""Every reader: the same records written in each format give the same counts and statistics,
an incident is found through each format, and damaged shards say where reading stopped."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ckptrescue.datasets.profiles.build import profile_dataset, profile_shard
from ckptrescue.datasets.profiles.compare import compare
from fixtures import profiles as fx

RECS = fx.shard_records(3, 0, 120)
LABELS = Counter(str(r["label"]) for r in RECS)
TEXT_BYTES = sum(len(r["text"].encode()) for r in RECS)


def _check_common(prof, text: str = "text", label: str = "label") -> None:  # noqa: ANN001
    assert prof.complete, prof.note
    assert prof.records == 120
    assert prof.dup_count == 0 and prof.dup_sampled == 120
    assert prof.near_checked == 120 and prof.near_count == 0
    lab = prof.fields[label]
    assert lab.top.exact and dict(lab.top.counts) == dict(LABELS)
    txt = prof.fields[text].dists["bytes"]
    assert txt.moments.n == 120
    assert round(txt.moments.mean * 120) == TEXT_BYTES


@pytest.mark.parametrize("variant", ["plain", "gzip", "zstd"])
def test_jsonl(tmp_path: Path, variant: str) -> None:
    if variant == "zstd":
        pytest.importorskip("zstandard")
    name = {"plain": "a.jsonl", "gzip": "a.jsonl.gz", "zstd": "a.jsonl.zst"}[variant]
    path = fx.write_jsonl(tmp_path / name, RECS, gz=variant == "gzip", zst=variant == "zstd")
    prof = profile_shard(path, tokenizer=fx.whitespace_tokenizer)
    assert prof.format == {"plain": "jsonl", "gzip": "jsonl+gzip", "zstd": "jsonl+zstd"}[variant]
    _check_common(prof)
    assert prof.fields["meta.lang"].top.counts['"en"'] + prof.fields["meta.lang"].top.counts.get(
        '"de"', 0) == 120
    assert prof.fields["score"].types == {"float": 120}
    assert prof.fields["text"].dists["tokens"].moments.n == 120


def test_parquet_and_arrow(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    prof = profile_shard(fx.write_parquet(tmp_path / "a.parquet", RECS))
    assert prof.format == "parquet"
    _check_common(prof)
    assert prof.fields["score_milli"].types == {"int": 120}
    arrow = profile_shard(fx.write_arrow(tmp_path / "a.arrow", RECS))
    assert arrow.format == "arrow"
    _check_common(arrow)
    only = profile_shard(tmp_path / "a.parquet", fields=["label"])
    assert set(only.fields) == {"label"} and only.options.fields == ("label",)


def test_tfrecord_examples(tmp_path: Path) -> None:
    prof = profile_shard(fx.write_tfrecord(tmp_path / "a.tfrecord", RECS))
    assert prof.format == "tfrecord"
    _check_common(prof)
    assert prof.fields["label"].types == {"int": 120}
    assert prof.fields["text"].types == {"str": 120}


def test_webdataset_tar(tmp_path: Path) -> None:
    prof = profile_shard(fx.write_webdataset(tmp_path / "a.tar", RECS))
    assert prof.format == "tar"
    _check_common(prof, text="txt", label="cls")
    assert set(prof.fields) == {"txt", "cls", "json.lang", "json.score_milli"}


def test_npy_rows_and_labels(tmp_path: Path) -> None:
    tokens = profile_shard(fx.write_npy_tokens(tmp_path / "tokens.npy", RECS))
    assert tokens.format == "npy" and tokens.complete and tokens.records == 120
    root = tokens.fields["$"]
    assert root.types == {"array<int32>": 120}
    assert root.dists["items"].moments.mean == 48
    assert root.dists["values"].moments.n == 120 * 48
    labels = profile_shard(fx.write_npy_labels(tmp_path / "labels.npy", RECS))
    assert labels.records == 120 and dict(labels.fields["$"].top.counts) == dict(LABELS)


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "tar"])
def test_label_flip_found_through_each_format(tmp_path: Path, fmt: str) -> None:
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    fx.make_dataset(tmp_path, 4, "labels", fmt=fmt, shards=6, n=200)
    result = compare(profile_dataset(tmp_path), mode="shards")
    label = "cls" if fmt == "tar" else "label"
    suffix = fx.WRITERS[fmt][0]
    assert {(f.details["shard"], f.code, f.details["field"]) for f in result.findings} == {
        (f"part-{fx.VICTIM:05d}{suffix}", "DP011", label)}


def test_npy_dataset_label_flip(tmp_path: Path) -> None:
    for name, recs in fx.dataset_records(5, "labels", shards=6, n=200):
        fx.write_npy_labels(tmp_path / f"{name}.npy", recs)
    result = compare(profile_dataset(tmp_path), mode="shards")
    assert [(f.details["shard"], f.code) for f in result.findings] == [
        (f"part-{fx.VICTIM:05d}.npy", "DP011")]


def test_truncated_tfrecord_is_an_incomplete_profile(tmp_path: Path) -> None:
    path = fx.write_tfrecord(tmp_path / "a.tfrecord", RECS)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    prof = profile_shard(path)
    assert not prof.complete and "truncated" in prof.note and 0 < prof.records < 120


def test_unparsed_jsonl_lines_are_counted(tmp_path: Path) -> None:
    path = fx.write_jsonl(tmp_path / "a.jsonl", RECS)
    path.write_bytes(path.read_bytes() + b"{not json\n")
    prof = profile_shard(path)
    assert prof.records == 120 and prof.unparsed == 1 and prof.complete


def test_damaged_shards_become_findings(tmp_path: Path) -> None:
    for name, recs in fx.dataset_records(6, None, shards=3, n=60):
        fx.write_tfrecord(tmp_path / f"{name}.tfrecord", recs)
    bad = tmp_path / "part-00001.tfrecord"
    bad.write_bytes(bad.read_bytes()[:-10])
    (tmp_path / "part-00002.tfrecord").write_bytes(b"")
    prof = profile_dataset(tmp_path)
    codes = [(f.code, f.details["shard"]) for f in compare(prof, mode="shards").findings]
    assert ("DP015", "part-00001.tfrecord") in codes


def test_sample_limits_records(tmp_path: Path) -> None:
    path = fx.write_jsonl(tmp_path / "a.jsonl", RECS)
    prof = profile_shard(path, sample=50)
    assert prof.records == 50 and prof.options.sample == 50


def test_other_files_are_not_profiled(tmp_path: Path) -> None:
    fx.write_jsonl(tmp_path / "a.jsonl", RECS)
    (tmp_path / "README.txt").write_text("not a shard\n")
    prof = profile_dataset(tmp_path)
    assert [s.path for s in prof.shards] == ["a.jsonl"]


def test_tokenizer_names(tmp_path: Path) -> None:
    from ckptrescue.datasets.profiles.tokens import resolve
    from ckptrescue.errors import CkptRescueError

    counter = resolve("whitespace")
    assert counter is not None and counter("a b  c") == 3
    fn = resolve(fx.whitespace_tokenizer)
    assert fn is not None and fn("a b") == 2
    try:
        import transformers  # noqa: F401
    except ImportError:
        with pytest.raises(CkptRescueError, match="transformers is not installed"):
            resolve("some-org/some-tokenizer")
