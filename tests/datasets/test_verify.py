"""dataset verify: every container format, damaged in the ways real storage damages files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from ckptrescue.checkpoints.formats.crc32c import masked_crc32c
from ckptrescue.datasets import tarshards
from ckptrescue.datasets.verify import verify_dataset
from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from fixtures.datasets import (
    flip_byte,
    tar_member_offsets,
    tfrecord_offsets,
    tree_digest,
    truncate,
    write_webdataset_tar,
)


def _by_path(result) -> dict:
    return {f.rel.decode(): f for f in result.files}


def test_a_clean_dataset_verifies(dataset) -> None:
    root, _ = dataset
    result = verify_dataset(root)
    by = _by_path(result)
    assert result.ok
    assert {p: f.status for p, f in by.items()} == {
        "README.txt": "unchecked", "arrays/embeddings.npy": "ok", "arrays/stats.npz": "ok",
        "shards/shard-000000.tar": "ok", "shards/shard-000001.tar": "ok",
        "tables/part-0.parquet": "ok", "text/captions.jsonl": "ok",
        "tfrecords/train-00000-of-00002.tfrecord": "ok",
        "tfrecords/train-00001-of-00002.tfrecord": "ok",
    }
    assert by["tfrecords/train-00000-of-00002.tfrecord"].records == 40
    assert by["shards/shard-000000.tar"].records == 24
    assert by["text/captions.jsonl"].records == 200


def test_tfrecord_data_crc_names_record_and_offset(dataset, case) -> None:
    root, files = dataset
    offsets = tfrecord_offsets(files["tfrecord"])
    flip_byte(files["tfrecord"], offsets[5] + 12 + 7)
    result = verify_dataset(root)
    record(case, from_library(result))  # the engine's one writer records it
    f = _by_path(result)["tfrecords/train-00000-of-00002.tfrecord"]
    [finding] = case.findings()
    assert (finding.code, finding.offset) == ("DS001", offsets[5])
    assert finding.details["index"] == 5
    assert f.status == "damaged"
    assert [(b.index, b.offset, b.problem) for b in f.bad_records] == [
        (5, offsets[5], "data CRC mismatch")]
    assert f.records == 40  # the checker went on after the bad record


def test_tfrecord_length_crc_resynchronises(dataset) -> None:
    root, files = dataset
    offsets = tfrecord_offsets(files["tfrecord"])
    flip_byte(files["tfrecord"], offsets[7] + 1)
    f = _by_path(verify_dataset(root))["tfrecords/train-00000-of-00002.tfrecord"]
    first, resync = f.bad_records
    assert (first.index, first.offset) == (7, offsets[7])
    assert "length CRC" in first.problem
    assert resync.offset == offsets[8]
    assert f.records == 39


def test_tfrecord_zero_filled_torn_write(dataset) -> None:
    root, files = dataset
    offsets = tfrecord_offsets(files["tfrecord"])
    data = bytearray(files["tfrecord"].read_bytes())
    start, end = offsets[10] + 40, offsets[15] + 5  # zeros from inside record 10 into 15's header
    data[start:end] = bytes(end - start)
    files["tfrecord"].write_bytes(bytes(data))
    f = _by_path(verify_dataset(root))["tfrecords/train-00000-of-00002.tfrecord"]
    problems = [(b.index, b.offset, b.problem.split(" (")[0]) for b in f.bad_records]
    assert problems[0] == (10, offsets[10], "data CRC mismatch")
    assert problems[1] == (11, offsets[11], "length CRC mismatch")
    assert problems[2][1] == offsets[16]  # resynchronised at the first intact header
    assert len(problems) == 3


def test_truncated_tfrecord(dataset) -> None:
    root, files = dataset
    offsets = tfrecord_offsets(files["tfrecord"])
    truncate(files["tfrecord"], offsets[30] + 40)
    f = _by_path(verify_dataset(root))["tfrecords/train-00000-of-00002.tfrecord"]
    [bad] = f.bad_records
    assert (bad.index, bad.offset) == (30, offsets[30]) and "truncated" in bad.problem


def test_tfrecord_without_a_tfrecord_name_is_recognised_by_its_header(tmp_path: Path,
                                                                      tf_tfrecord) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "shard_0007").write_bytes(tf_tfrecord.read_bytes())
    [f] = verify_dataset(tmp_path / "d").files
    assert (f.format, f.status, f.records) == ("tfrecord", "ok", 40)


def test_tar_header_checksum_names_the_sample_key(dataset) -> None:
    root, files = dataset
    members = tar_member_offsets(files["tar"])
    flip_byte(files["tar"], members["sample00003.bin"] + 140)  # the mtime field
    f = _by_path(verify_dataset(root))["shards/shard-000000.tar"]
    [bad] = f.bad_records
    assert (bad.index, bad.offset, bad.key) == (7, members["sample00003.bin"], "sample00003")
    assert bad.problem == "header checksum mismatch"
    assert f.records == 23  # resynchronised at the next header


def test_truncated_tar_member_names_the_sample_key(dataset) -> None:
    root, files = dataset
    members = tar_member_offsets(files["tar2"])
    truncate(files["tar2"], members["sample00002.bin"] + 512 + 300)
    [bad] = _by_path(verify_dataset(root))["shards/shard-000001.tar"].bad_records
    assert (bad.index, bad.offset, bad.key) == (5, members["sample00002.bin"], "sample00002")
    assert "300 of 900 bytes" in bad.problem


def test_tar_cut_at_a_member_boundary_is_caught(dataset) -> None:
    root, files = dataset
    truncate(files["tar2"], tar_member_offsets(files["tar2"])["sample00004.txt"])
    [bad] = _by_path(verify_dataset(root))["shards/shard-000001.tar"].bad_records
    assert bad.index == 8 and "end-of-archive" in bad.problem


def test_sample_keys() -> None:
    assert tarshards.sample_key("a/b/000123.seg.png") == "a/b/000123"
    assert tarshards.sample_key("000123.jpg") == "000123"


def test_gnu_long_names_give_the_long_key(tmp_path: Path) -> None:
    import io
    import tarfile

    root = tmp_path / "d"
    root.mkdir()
    long_key = "x" * 120 + "/sample"
    with tarfile.open(root / "s.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(long_key + ".bin")
        info.size = 2000
        tar.addfile(info, io.BytesIO(b"z" * 2000))
    truncate(root / "s.tar", 3 * 512 + 100)
    [bad] = verify_dataset(root).files[0].bad_records
    assert bad.key == long_key


def test_parquet_damaged_column_chunk_names_row_group_and_column(dataset) -> None:
    import pyarrow.parquet as pq

    root, files = dataset
    col = pq.ParquetFile(files["parquet"]).metadata.row_group(1).column(2)
    start = col.dictionary_page_offset or col.data_page_offset
    flip_byte(files["parquet"], start + col.total_compressed_size - 20)
    f = _by_path(verify_dataset(root))["tables/part-0.parquet"]
    [bad] = f.bad_records
    assert (bad.index, bad.key, bad.offset) == (1, "score", start)
    assert "does not decode" in bad.problem


def test_parquet_truncated_footer(dataset) -> None:
    root, files = dataset
    truncate(files["parquet"], files["parquet"].stat().st_size - 100)
    [bad] = _by_path(verify_dataset(root))["tables/part-0.parquet"].bad_records
    assert "magic" in bad.problem and "end" in bad.problem


def test_jsonl_names_the_line(dataset) -> None:
    root, files = dataset
    data = files["jsonl"].read_bytes()
    lines = data.split(b"\n")
    offset = sum(len(x) + 1 for x in lines[:57])
    files["jsonl"].write_bytes(data[: offset + 5] + b"\0" * 8 + data[offset + 13 :])
    [bad] = _by_path(verify_dataset(root))["text/captions.jsonl"].bad_records
    assert (bad.index, bad.offset) == (57, offset)
    assert bad.problem.startswith("line 58:")


def test_jsonl_truncated_last_line(dataset) -> None:
    root, files = dataset
    truncate(files["jsonl"], files["jsonl"].stat().st_size - 10)
    [bad] = _by_path(verify_dataset(root))["text/captions.jsonl"].bad_records
    assert bad.index == 199 and "truncated" in bad.problem


def test_npy_header_against_size(dataset) -> None:
    root, files = dataset
    truncate(files["npy"], 5000)
    [bad] = _by_path(verify_dataset(root))["arrays/embeddings.npy"].bad_records
    assert "header promises 16384 data bytes" in bad.problem


def test_npz_member_crc(dataset) -> None:
    import zipfile

    root, files = dataset
    with zipfile.ZipFile(files["npz"]) as z:
        info = z.getinfo("b.npy")
    flip_byte(files["npz"], info.header_offset + 30 + len("b.npy") + 40)
    [bad] = _by_path(verify_dataset(root))["arrays/stats.npz"].bad_records
    assert (bad.index, bad.key, bad.offset) == (1, "b.npy", info.header_offset)


def test_object_arrays_are_not_loaded(tmp_path: Path) -> None:
    import numpy as np

    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    [f] = verify_dataset(tmp_path / "d").files
    assert f.status == "unchecked" and "pickle" in f.note


def test_verify_json_shape_and_read_only(dataset) -> None:
    root, files = dataset
    flip_byte(files["tfrecord"], tfrecord_offsets(files["tfrecord"])[2] + 12)
    before = tree_digest(root)
    data = json.loads(json.dumps(verify_dataset(root).to_json()))
    assert tree_digest(root) == before
    for f in data["files"]:
        assert set(f) == {"path", "format", "status", "bad_records", "records", "note"}
        for b in f["bad_records"]:
            assert {"index", "offset", "key"} <= set(b)
    bad = next(f for f in data["files"] if f["status"] == "damaged")
    assert bad["bad_records"][0]["index"] == 2


@pytest.mark.parametrize("cut", [0, 100, 511, 513])
def test_tar_checker_never_crashes_on_cut_shards(tmp_path: Path, cut: int) -> None:
    root = tmp_path / "d"
    root.mkdir()
    write_webdataset_tar(root / "s.tar", samples=2)
    truncate(root / "s.tar", cut)
    [f] = verify_dataset(root).files
    assert (f.format, f.status) == ("tar", "damaged")  # even an empty .tar is a cut shard
    assert f.bad_records[0].offset in (0, 512)


def test_masked_crc_matches_tensorflow(tf_tfrecord) -> None:
    data = tf_tfrecord.read_bytes()
    length = data[:8]
    assert struct.unpack("<I", data[8:12])[0] == masked_crc32c(length)


def test_gzip_compressed_tfrecord_and_tar(tmp_path: Path, tf_tfrecord) -> None:
    import gzip

    root = tmp_path / "d"
    root.mkdir()
    (root / "a.tfrecord.gz").write_bytes(gzip.compress(tf_tfrecord.read_bytes()))
    write_webdataset_tar(tmp_path / "s.tar", samples=4)
    raw = (tmp_path / "s.tar").read_bytes()
    (root / "s.tar.gz").write_bytes(gzip.compress(raw))
    by = _by_path(verify_dataset(root))
    assert (by["a.tfrecord.gz"].format, by["a.tfrecord.gz"].status) == ("tfrecord+gzip", "ok")
    assert by["a.tfrecord.gz"].records == 40
    assert (by["s.tar.gz"].format, by["s.tar.gz"].status) == ("tar+gzip", "ok")
    # a gzip stream cut short: the record where the readable data stops is named
    packed = gzip.compress(raw)
    (root / "s.tar.gz").write_bytes(packed[: len(packed) // 2])
    member, stream = _by_path(verify_dataset(root))["s.tar.gz"].bad_records
    assert member.index is not None and member.offset is not None  # where the data stops
    assert stream.problem.startswith("gzip member 0 (compressed bytes from 0): the gzip "
                                     "member is cut short")


def test_without_pyarrow_parquet_is_unchecked_and_says_why(dataset) -> None:
    import subprocess
    import sys

    root, _ = dataset
    code = ("import sys; sys.modules['pyarrow'] = None; sys.modules['pyarrow.parquet'] = None\n"
            "from ckptrescue.datasets.verify import verify_dataset\n"
            "r = verify_dataset(sys.argv[1])\n"
            "f = [x for x in r.files if x.format == 'parquet'][0]\n"
            "print(f.status, '|', f.note, '|', r.counts['ok'])\n")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    status, note, ok = (x.strip() for x in out.split("|"))
    assert status == "unchecked" and "pyarrow" in note and "ckptrescue[data]" in note
    assert ok == "7"
