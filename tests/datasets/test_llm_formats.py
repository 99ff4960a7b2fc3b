"""LLM-era dataset formats: Arrow IPC, Hugging Face ``datasets`` directories, Megatron
``.bin``/``.idx``, MosaicML MDS. Fixtures come from the real writers (fixtures/llm_datasets.py);
the real readers are the oracle: intact data loads, damaged data fails or loses exactly the
records the checker names."""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ckptrescue.datasets import arrow_ipc, format_heads, hf_cache, mds, megatron_indexed  # noqa: E402
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, open_tracked  # noqa: E402
from fixtures import llm_datasets as fx  # noqa: E402

pa = pytest.importorskip("pyarrow")


def copy(src: Path, dst: Path) -> Path:
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy(src, dst)
    return dst


def check_file(module: Any, path: Path) -> CheckOutcome:
    with open_tracked(str(path)) as fh:
        return module.check(fh, path.stat().st_size)


def only(bad: list[BadRecord]) -> BadRecord:
    assert len(bad) == 1, bad
    return bad[0]


# =========================================================================== Arrow IPC


@pytest.fixture(scope="module")
def arrow_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("arrow")
    fx.write_arrow(d / "t.arrow", stream=False)
    fx.write_arrow(d / "t.arrows", stream=True)
    fx.write_arrow(d / "tz.arrows", stream=True, compression="zstd")
    fx.write_arrow(d / "tz.arrow", stream=False, compression="lz4")
    fx.write_arrow_dictionary(d / "dict.arrows")
    return d


def messages(path: Path) -> list[tuple[int, int, int, int]]:
    """(offset, header type, metadata size, body length) of each message, by a plain walk."""
    data = path.read_bytes()
    pos = 8 if data[:6] == b"ARROW1" else 0
    out = []
    while True:
        (size,) = struct.unpack_from("<i", data, pos + 4)
        if size == 0:
            return out
        msg = arrow_ipc.parse_message(data[pos + 8: pos + 8 + size])
        out.append((pos, msg.header_type, size, msg.body_length))
        pos += 8 + size + msg.body_length


def batches_of(path: Path) -> list[tuple[int, int, int, int]]:
    return [m for m in messages(path) if m[1] == 3]


def stream_rows_read(path: Path) -> tuple[int, bool]:
    """pyarrow's stream reader: (rows read, whether it raised)."""
    rows = 0
    try:
        with pa.ipc.open_stream(pa.OSFile(str(path))) as reader:
            for b in reader:
                b.validate(full=True)
                rows += b.num_rows
    except (pa.ArrowException, OSError, ValueError):
        return rows, True
    return rows, False


@pytest.mark.parametrize("name", ["t.arrow", "t.arrows", "tz.arrows", "tz.arrow", "dict.arrows"])
def test_arrow_intact_files_check_clean(arrow_dir: Path, name: str) -> None:
    path = arrow_dir / name
    out = check_file(arrow_ipc, path)
    assert out.bad == [] and out.unchecked_reason is None
    want = 3 if name == "dict.arrows" else fx.ARROW_ROWS // fx.ARROW_BATCH
    assert out.records == want
    head = path.read_bytes()[:512]
    assert format_heads.arrow_file(head) == name.endswith(".arrow")
    assert arrow_ipc.looks_like_stream(head) == name.endswith(".arrows")
    # oracle: pyarrow reads every row
    opener = pa.ipc.open_file if name.endswith(".arrow") else pa.ipc.open_stream
    table = opener(pa.OSFile(str(path))).read_all()
    assert table.num_rows == (30 if name == "dict.arrows" else fx.ARROW_ROWS)
    if name != "dict.arrows":
        assert table.column("id").to_pylist() == list(range(fx.ARROW_ROWS))


@pytest.mark.parametrize("where", ["body", "metadata", "prefix", "boundary", "schema"])
def test_arrow_stream_truncated(arrow_dir: Path, tmp_path: Path, where: str) -> None:
    src = arrow_dir / "t.arrows"
    batches = batches_of(src)
    k = 3
    off, _, meta, body = batches[k]
    cut = {"body": off + 8 + meta + body // 2, "metadata": off + 8 + meta // 2,
           "prefix": off + 6, "boundary": off, "schema": 100}[where]
    path = copy(src, tmp_path / "t.arrows")
    fx.truncate(path, cut)
    out = check_file(arrow_ipc, path)
    bad = only(out.bad)
    if where == "schema":
        assert (bad.index, bad.offset) == (0, 0)
        assert out.records == 0
    else:
        assert (bad.index, bad.offset) == (k, off), bad
        assert out.records == k
    # oracle: pyarrow reads exactly the batches before k, then fails (or, cut at a message
    # boundary, stops silently: the rows after are lost, which only the checker reports)
    rows, raised = stream_rows_read(path)
    assert rows == (0 if where == "schema" else k * fx.ARROW_BATCH)
    assert raised == (where != "boundary")


def test_arrow_truncation_never_raises(arrow_dir: Path, tmp_path: Path) -> None:
    for name in ("t.arrow", "t.arrows", "dict.arrows", "tz.arrows"):
        data = (arrow_dir / name).read_bytes()
        for cut in range(0, len(data) - 1, 61):
            path = tmp_path / f"cut-{cut}-{name}"
            path.write_bytes(data[:cut])
            out = check_file(arrow_ipc, path)
            assert out.bad, (name, cut)
            path.unlink()


def test_arrow_file_truncated_loses_footer(arrow_dir: Path, tmp_path: Path) -> None:
    src = arrow_dir / "t.arrow"
    off, _, meta, _ = batches_of(src)[5]
    path = copy(src, tmp_path / "t.arrow")
    fx.truncate(path, off + 8 + meta + 3)
    out = check_file(arrow_ipc, path)
    assert [(b.index, b.offset, b.key) for b in out.bad] == [
        (None, path.stat().st_size, "footer"), (5, off, None)]
    assert out.records == 5
    with pytest.raises(pa.ArrowInvalid):  # oracle: the file reader needs the footer
        pa.ipc.open_file(str(path))


def test_arrow_flipped_metadata_size(arrow_dir: Path, tmp_path: Path) -> None:
    src = arrow_dir / "t.arrows"
    off = batches_of(src)[2][0]
    path = copy(src, tmp_path / "t.arrows")
    fx.flip(path, off + 7, 0x80)  # the top byte of the int32 size: negative
    out = check_file(arrow_ipc, path)
    bad = only(out.bad)
    assert (bad.index, bad.offset) == (2, off) and "impossible" in bad.problem
    assert stream_rows_read(path) == (2 * fx.ARROW_BATCH, True)


def test_arrow_flipped_continuation_marker(arrow_dir: Path, tmp_path: Path) -> None:
    src = arrow_dir / "t.arrows"
    off = batches_of(src)[6][0]
    path = copy(src, tmp_path / "t.arrows")
    fx.flip(path, off + 1, 0x01)
    bad = check_file(arrow_ipc, path).bad[0]
    assert (bad.index, bad.offset) == (6, off)
    assert stream_rows_read(path) == (6 * fx.ARROW_BATCH, True)


def _footer_block_at(path: Path, i: int) -> int:
    """Byte offset of record batch block ``i`` in the footer."""
    data = path.read_bytes()
    (footer_size,) = struct.unpack_from("<i", data, len(data) - 10)
    start = len(data) - 10 - footer_size
    off, _, meta, body = batches_of(path)[i]
    where = data.find(struct.pack("<qi", off, meta + 8), start)
    assert where > 0
    return where


def test_arrow_footer_block_points_past_data(arrow_dir: Path, tmp_path: Path) -> None:
    src = arrow_dir / "t.arrow"
    path = copy(src, tmp_path / "t.arrow")
    at = _footer_block_at(path, 7)
    with path.open("r+b") as fh:
        fh.seek(at + 16)  # bodyLength of block 7
        fh.write(struct.pack("<q", 1 << 20))
    out = check_file(arrow_ipc, path)
    bad = only(out.bad)
    assert (bad.index, bad.offset, bad.key) == (7, batches_of(src)[7][0], "footer")
    reader = pa.ipc.open_file(str(path))  # oracle: batch 7 cannot be read, 6 can
    reader.get_batch(6).validate(full=True)
    with pytest.raises((pa.ArrowException, OSError)):
        reader.get_batch(7).validate(full=True)


def test_arrow_buffer_points_past_body(arrow_dir: Path, tmp_path: Path) -> None:
    src = arrow_dir / "t.arrows"
    off, _, meta, body = batches_of(src)[4]
    data = bytearray(src.read_bytes())
    metadata = bytes(data[off + 8: off + 8 + meta])
    msg = arrow_ipc.parse_message(metadata)
    assert msg.buffers
    last_off, last_len = msg.buffers[-1]
    at = metadata.find(struct.pack("<qq", last_off, last_len))
    assert at > 0
    struct.pack_into("<qq", data, off + 8 + at, last_off, body + 64)
    path = tmp_path / "t.arrows"
    path.write_bytes(bytes(data))
    bad = only(check_file(arrow_ipc, path).bad)
    assert (bad.index, bad.offset) == (4, off) and "outside" in bad.problem
    rows, raised = stream_rows_read(path)
    assert (rows, raised) == (4 * fx.ARROW_BATCH, True)


# =========================================================================== Hugging Face


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("datasets")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    d = tmp_path_factory.mktemp("hf")
    saved = fx.write_hf_saved(d / "saved")
    builder = fx.write_hf_builder_cache(d / "builder")
    return {"saved": saved, "builder": builder}


def _load_rows(path: Path) -> int:
    import datasets

    ds = datasets.load_from_disk(str(path))
    return sum(len(batch["id"]) for batch in ds.iter(batch_size=50))


def test_hf_intact_directories_check_clean(hf_dirs: dict[str, Path]) -> None:
    for kind, path in hf_dirs.items():
        out = hf_cache.check_dir(path)
        assert out.bad == [] and out.unchecked_reason is None, kind
    assert _load_rows(hf_dirs["saved"]) == fx.HF_ROWS
    head = (hf_dirs["saved"] / "state.json").read_bytes()[:512]
    assert format_heads.hf_state(head)
    info = (hf_dirs["builder"] / "dataset_info.json").read_bytes()[:512]
    assert format_heads.hf_builder_info(info)
    for f in hf_dirs["saved"].glob("*.arrow"):  # HF caches are Arrow streams
        assert arrow_ipc.looks_like_stream(f.read_bytes()[:512])


def test_hf_missing_data_file_named(hf_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = copy(hf_dirs["saved"], tmp_path / "saved")
    (path / "data-00001-of-00003.arrow").unlink()
    bad = only(hf_cache.check_dir(path).bad)
    assert bad.key == "data-00001-of-00003.arrow" and "missing" in bad.problem
    with pytest.raises(FileNotFoundError):
        _load_rows(path)


@pytest.mark.parametrize("cut", [-9, -200, 300])
def test_hf_truncated_shard(hf_dirs: dict[str, Path], tmp_path: Path, cut: int) -> None:
    path = copy(hf_dirs["saved"], tmp_path / "saved")
    victim = path / "data-00002-of-00003.arrow"
    batches = batches_of(victim)
    size = victim.stat().st_size
    fx.truncate(victim, size + cut if cut < 0 else cut)
    out = hf_cache.check_dir(path)
    bad = only(out.bad)
    assert bad.key == "data-00002-of-00003.arrow"
    if cut == -9:  # only the end-of-stream marker (and a byte of the body) is gone
        assert (bad.index, bad.offset) == (len(batches) - 1, batches[-1][0])
    elif cut == 300:  # inside the schema message
        assert (bad.index, bad.offset) == (0, 0)
    else:
        assert bad.index is not None and bad.offset == batches[bad.index][0]
    with pytest.raises(Exception):  # noqa: B017 - pyarrow/datasets raise various types
        _load_rows(path)


def test_hf_builder_cache_num_examples(hf_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = copy(hf_dirs["builder"], tmp_path / "builder")
    (arrow,) = path.glob("*-train.arrow")
    first = batches_of(arrow)[0]
    fx.truncate(arrow, first[0] + 8 + first[2] + 5)
    out = hf_cache.check_dir(path)
    keys = [(b.key, b.index, b.offset) for b in out.bad]
    assert keys[0] == (arrow.name, 0, first[0])
    assert keys[1][0] == "dataset_info.json" and f"says {fx.HF_ROWS}" in out.bad[1].problem
    assert stream_rows_read(arrow) == (0, True)
    arrow.unlink()
    bad = only(hf_cache.check_dir(path).bad)
    assert "no Arrow file" in bad.problem and f"{fx.HF_ROWS} examples lost" in bad.problem


def test_hf_state_json_damaged(hf_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = copy(hf_dirs["saved"], tmp_path / "saved")
    fx.truncate(path / "state.json", 20)
    bad = only(hf_cache.check_dir(path).bad)
    assert bad.key == "state.json" and "does not parse" in bad.problem
    with pytest.raises(Exception):  # noqa: B017
        _load_rows(path)


# =========================================================================== Megatron


@pytest.fixture(scope="module")
def megatron(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("megatron.core.datasets.indexed_dataset")
    d = tmp_path_factory.mktemp("megatron")
    return fx.write_megatron(d / "corpus_text_document")


N_SEQ = fx.MEGATRON_DOCS * fx.MEGATRON_SEQS_PER_DOC


def _itemsize() -> int:
    return 2  # uint16, as write_megatron builds it


def _ptr_of(i: int) -> int:
    return sum(len(fx.token_ids(k)) for k in range(i)) * _itemsize()


def _len_at(i: int) -> int:
    return megatron_indexed.HEADER_SIZE + 4 * i


def _ptr_at(i: int) -> int:
    return megatron_indexed.HEADER_SIZE + 4 * N_SEQ + 8 * i


def _doc_at(k: int) -> int:
    return megatron_indexed.HEADER_SIZE + 12 * N_SEQ + 8 * k


def _megatron_sequences(prefix: Path) -> list[Any]:
    """Oracle: megatron-core's IndexedDataset; each sequence or the exception reading it."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    ds = IndexedDataset(str(prefix))
    out: list[Any] = []
    for i in range(len(ds)):
        try:
            out.append(ds[i].tolist())
        except Exception as exc:  # noqa: BLE001 - numpy raises ValueError on a short buffer
            out.append(exc)
    return out


def _mcopy(src: Path, tmp: Path) -> Path:
    for ext in (".bin", ".idx"):
        shutil.copy(f"{src}{ext}", tmp / f"c{ext}")
    return tmp / "c"


def test_megatron_intact(megatron: Path) -> None:
    out = megatron_indexed.check_path(f"{megatron}.idx")
    assert out.bad == [] and out.records == N_SEQ
    assert format_heads.megatron_index(Path(f"{megatron}.idx").read_bytes()[:64])
    assert _megatron_sequences(megatron) == [fx.token_ids(i) for i in range(N_SEQ)]
    size = Path(f"{megatron}.idx").stat().st_size
    assert size == megatron_indexed.HEADER_SIZE + 12 * N_SEQ + 8 * (fx.MEGATRON_DOCS + 1)


@pytest.mark.parametrize("victim", [5, 17, N_SEQ - 1])
def test_megatron_bin_truncated(megatron: Path, tmp_path: Path, victim: int) -> None:
    prefix = _mcopy(megatron, tmp_path)
    cut = _ptr_of(victim) + 3
    fx.truncate(Path(f"{prefix}.bin"), cut)
    out = megatron_indexed.check_path(f"{prefix}.idx")
    bad = only(out.bad)
    assert (bad.index, bad.offset, bad.key) == (victim, _ptr_of(victim), "c.bin")
    assert out.records == victim
    seqs = _megatron_sequences(prefix)
    assert seqs[:victim] == [fx.token_ids(i) for i in range(victim)]
    assert all(isinstance(s, Exception) or s != fx.token_ids(i)
               for i, s in enumerate(seqs) if i >= victim)


@pytest.mark.parametrize(("cut", "entry"), [(20, None), (_len_at(9) + 1, 9), (_ptr_at(4) + 5, 4),
                                             (_doc_at(3), 3)])
def test_megatron_idx_truncated(megatron: Path, tmp_path: Path, cut: int,
                                entry: int | None) -> None:
    prefix = _mcopy(megatron, tmp_path)
    fx.truncate(Path(f"{prefix}.idx"), cut)
    bad = only(megatron_indexed.check_path(f"{prefix}.idx").bad)
    assert (bad.index, bad.offset, bad.key) == (entry, 0 if entry is None else cut, "c.idx")
    with pytest.raises((ValueError, AssertionError, struct.error)):
        _megatron_sequences(prefix)


def test_megatron_pointer_flipped(megatron: Path, tmp_path: Path) -> None:
    prefix = _mcopy(megatron, tmp_path)
    fx.flip(Path(f"{prefix}.idx"), _ptr_at(11) + 1, 0x04)
    out = megatron_indexed.check_path(f"{prefix}.idx")
    bad = only(out.bad)
    assert (bad.index, bad.offset, bad.key) == (11, _ptr_at(11), "c.idx")
    seqs = _megatron_sequences(prefix)
    assert [i for i, s in enumerate(seqs) if s != fx.token_ids(i)] == [11]


def test_megatron_length_flipped(megatron: Path, tmp_path: Path) -> None:
    prefix = _mcopy(megatron, tmp_path)
    fx.flip(Path(f"{prefix}.idx"), _len_at(20), 0x01)
    bad = only(megatron_indexed.check_path(f"{prefix}.idx").bad)
    assert (bad.index, bad.offset, bad.key) == (20, _len_at(20), "c.idx")
    seqs = _megatron_sequences(prefix)
    assert [i for i, s in enumerate(seqs) if s != fx.token_ids(i)] == [20]


@pytest.mark.parametrize(("offset", "field"), [(18, "sequence count"), (26, "document count")])
def test_megatron_count_flipped(megatron: Path, tmp_path: Path, offset: int, field: str) -> None:
    prefix = _mcopy(megatron, tmp_path)
    fx.flip(Path(f"{prefix}.idx"), offset, 0x01)
    bad = only(megatron_indexed.check_path(f"{prefix}.idx").bad)
    assert (bad.index, bad.offset) == (None, offset) and field in bad.problem
    with pytest.raises((ValueError, AssertionError)):
        _megatron_sequences(prefix)


def test_megatron_document_index_flipped(megatron: Path, tmp_path: Path) -> None:
    prefix = _mcopy(megatron, tmp_path)
    fx.flip(Path(f"{prefix}.idx"), _doc_at(4) + 2, 0x01)
    bad = only(megatron_indexed.check_path(f"{prefix}.idx").bad)
    assert (bad.index, bad.offset) == (4, _doc_at(4))


def test_megatron_magic_flipped(megatron: Path, tmp_path: Path) -> None:
    prefix = _mcopy(megatron, tmp_path)
    fx.flip(Path(f"{prefix}.idx"), 3)
    bad = only(megatron_indexed.check_path(f"{prefix}.idx").bad)
    assert (bad.index, bad.offset) == (None, 0) and "magic" in bad.problem
    with pytest.raises(AssertionError, match="bad header"):
        _megatron_sequences(prefix)


@pytest.mark.parametrize("gone", [".bin", ".idx"])
def test_megatron_missing_partner_named(megatron: Path, tmp_path: Path, gone: str) -> None:
    prefix = _mcopy(megatron, tmp_path)
    Path(f"{prefix}{gone}").unlink()
    other = ".idx" if gone == ".bin" else ".bin"
    bad = only(megatron_indexed.check_path(f"{prefix}{other}").bad)
    assert bad.key == f"c{gone}" and "missing" in bad.problem
    with pytest.raises(AssertionError, match="cannot be found"):
        _megatron_sequences(prefix)


# =========================================================================== MDS


@pytest.fixture(scope="module")
def mds_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mds")
    out = {"raw": fx.write_mds(d / "raw")}
    pytest.importorskip("zstandard")
    out["zstd"] = fx.write_mds(d / "zstd", compression="zstd", hashes=("md5", "sha1", "xxh64"))
    return out


def _index(root: Path) -> list[dict[str, Any]]:
    return list(json.loads((root / "index.json").read_text())["shards"])


def _mds_samples(root: Path, shard: int) -> list[Any]:
    """Oracle: the MDS reader's logic (get_sample_data + decode_sample) on every sample."""
    entry = _index(root)[shard]
    path = root / entry["raw_data"]["basename"]
    out: list[Any] = []
    for i in range(entry["samples"]):
        try:
            out.append(fx.read_mds_sample(path, i, entry))
        except Exception as exc:  # noqa: BLE001 - whatever the damaged bytes cause
            out.append(exc)
    return out


def _expected(shard: int) -> list[dict[str, Any]]:
    return [fx.mds_sample(i) for i in range(20 * shard, 20 * shard + 20)]


def _table(root: Path, shard: int) -> list[int]:
    data = (root / f"shard.{shard:05}.mds").read_bytes()
    (n,) = struct.unpack_from("<I", data)
    return list(struct.unpack_from(f"<{n + 1}I", data, 4))


def test_mds_intact(mds_dirs: dict[str, Path]) -> None:
    for kind, root in mds_dirs.items():
        out = mds.check_dir(root)
        assert out.bad == [] and out.unchecked_reason is None and out.records == fx.MDS_ROWS, kind
    root = mds_dirs["raw"]
    for s in range(3):
        assert _mds_samples(root, s) == _expected(s)
        out = check_file(mds, root / f"shard.{s:05}.mds")
        assert out.bad == [] and out.records == 20
        assert format_heads.mds_shard((root / f"shard.{s:05}.mds").read_bytes()[:512])
    assert format_heads.mds_index((root / "index.json").read_bytes()[:512])


@pytest.mark.parametrize("victim", [0, 7, 19])
def test_mds_shard_truncated(mds_dirs: dict[str, Path], tmp_path: Path, victim: int) -> None:
    root = copy(mds_dirs["raw"], tmp_path / "raw")
    table = _table(root, 1)
    fx.truncate(root / "shard.00001.mds", table[victim] + 2)
    out = mds.check_dir(root)
    per_sample = [b for b in out.bad if b.index is not None]
    assert [(b.index, b.offset, b.key) for b in per_sample] == [
        (victim, table[victim], "shard.00001.mds")]
    shard_level = [b.problem for b in out.bad if b.index is None]
    assert any("truncated" in p for p in shard_level) and any("sha1" in p for p in shard_level)
    got = _mds_samples(root, 1)
    want = _expected(1)
    assert got[:victim] == want[:victim]
    assert all(g != w for g, w in zip(got[victim:], want[victim:], strict=True))


def test_mds_offset_flipped(mds_dirs: dict[str, Path], tmp_path: Path) -> None:
    root = copy(mds_dirs["raw"], tmp_path / "raw")
    table = _table(root, 2)
    entry = 4 + 4 * 8  # offset table entry 8: where sample 8 starts and sample 7 ends
    fx.flip(root / "shard.00002.mds", entry + 1, 0x02)  # too large
    out = mds.check_dir(root)
    per_sample = [(b.index, b.offset) for b in out.bad if b.index is not None]
    assert per_sample == [(8, entry)]
    got, want = _mds_samples(root, 2), _expected(2)
    assert [i for i in range(20) if got[i] != want[i]] == [8]  # 7 reads extra bytes, ignored
    root = copy(mds_dirs["raw"], tmp_path / "raw2")
    with (root / "shard.00002.mds").open("r+b") as fh:  # too small: 7 cut, 8 starts inside 7
        fh.seek(entry)
        fh.write(struct.pack("<I", table[7] + 2))
    out = mds.check_dir(root)
    per_sample = [(b.index, b.offset) for b in out.bad if b.index is not None]
    assert per_sample == [(7, table[7]), (8, table[7] + 2)]  # in order: found by the walk
    got = _mds_samples(root, 2)
    assert [i for i in range(20) if got[i] != want[i]] == [7, 8]


def test_mds_last_offset_points_past_data(mds_dirs: dict[str, Path], tmp_path: Path) -> None:
    root = copy(mds_dirs["raw"], tmp_path / "raw")
    table = _table(root, 0)
    with (root / "shard.00000.mds").open("r+b") as fh:
        fh.seek(4 + 4 * 20)
        fh.write(struct.pack("<I", table[20] + 100))
    out = mds.check_dir(root)
    # the reader reads sample 19 whole (to the end of the file): only the entry is damaged
    assert [(b.index, b.offset) for b in out.bad if b.index is not None] == []
    assert any(b.offset == 4 + 4 * 20 and "entry 20" in b.problem for b in out.bad)
    assert out.records == fx.MDS_ROWS
    assert _mds_samples(root, 0) == _expected(0)
    with (root / "shard.00000.mds").open("r+b") as fh:  # now short of sample 19's bytes
        fh.seek(4 + 4 * 20)
        fh.write(struct.pack("<I", table[19] + 9))
    out = mds.check_dir(root)
    assert [(b.index, b.offset) for b in out.bad if b.index is not None] == [(19, table[19])]
    got, want = _mds_samples(root, 0), _expected(0)
    assert [i for i in range(20) if got[i] != want[i]] == [19]


def test_mds_sample_count_flipped(mds_dirs: dict[str, Path], tmp_path: Path) -> None:
    root = copy(mds_dirs["raw"], tmp_path / "raw")
    fx.flip(root / "shard.00001.mds", 0, 0x04)
    out = mds.check_dir(root)
    header = [b for b in out.bad if b.offset == 0]
    assert len(header) == 1 and "sample count damaged" in header[0].problem
    assert out.records == fx.MDS_ROWS  # the samples themselves are intact
    assert _mds_samples(root, 1) == _expected(1)  # the reader does not use the count


def test_mds_column_size_flipped(mds_dirs: dict[str, Path], tmp_path: Path) -> None:
    root = copy(mds_dirs["raw"], tmp_path / "raw")
    table = _table(root, 1)
    fx.flip(root / "shard.00001.mds", table[12], 0x01)  # the first variable column size
    out = mds.check_dir(root)
    per_sample = [(b.index, b.offset) for b in out.bad if b.index is not None]
    assert per_sample == [(12, table[12])]
    got, want = _mds_samples(root, 1), _expected(1)
    assert [i for i in range(20) if got[i] != want[i]] == [12]


def test_mds_data_byte_flipped_fails_its_hashes(mds_dirs: dict[str, Path],
                                                tmp_path: Path) -> None:
    root = copy(mds_dirs["raw"], tmp_path / "raw")
    size = (root / "shard.00002.mds").stat().st_size
    fx.flip(root / "shard.00002.mds", size - 3, 0x20)
    out = mds.check_dir(root)
    assert sorted(b.problem.split()[0] for b in out.bad) == ["sha1", "xxh64"]
    assert all(b.key == "shard.00002.mds" and "samples 40..59" in b.problem for b in out.bad)


def test_mds_missing_shard_named(mds_dirs: dict[str, Path], tmp_path: Path) -> None:
    root = copy(mds_dirs["raw"], tmp_path / "raw")
    (root / "shard.00001.mds").unlink()
    bad = only(mds.check_dir(root).bad)
    assert bad.key == "shard.00001.mds" and "samples 20..39 (20) lost" in bad.problem
    (root / "index.json").unlink()
    assert "index.json is missing" in only(mds.check_dir(root).bad).problem


def test_mds_zstd_damaged(mds_dirs: dict[str, Path], tmp_path: Path) -> None:
    root = copy(mds_dirs["zstd"], tmp_path / "zstd")
    victim = root / "shard.00001.mds.zstd"
    fx.flip(victim, victim.stat().st_size // 2)
    out = mds.check_dir(root)
    assert out.bad and all(b.key == "shard.00001.mds.zstd" for b in out.bad)
    assert {p.split()[0] for p in (b.problem for b in out.bad)} >= {"md5", "sha1", "xxh64"}
    fx.truncate(victim, 100)
    out = mds.check_dir(root)
    assert any("index.json says" in b.problem for b in out.bad)


def test_mds_truncation_never_raises(mds_dirs: dict[str, Path], tmp_path: Path) -> None:
    data = (mds_dirs["raw"] / "shard.00000.mds").read_bytes()
    for cut in range(0, len(data) - 1, 37):
        path = tmp_path / "s.mds"
        path.write_bytes(data[:cut])
        out = check_file(mds, path)
        assert out.bad, cut


# =========================================================================== registration


def proposed_detect(head: bytes) -> str:
    """The format ``datasets/detect.py`` names from a file's first bytes alone."""
    from ckptrescue.datasets.detect import detect

    return detect("", head)


def proposed_check(path: Path) -> tuple[str, CheckOutcome | None]:
    from ckptrescue.datasets.decompress import Decompressed, compression_of, peek

    with open_tracked(str(path)) as fh:
        head = fh.read(512)
        fh.seek(0)
        kind = compression_of(head)
        fmt = proposed_detect(peek(fh, kind, 512) if kind else head)
        if fmt == "other":
            return fmt, None
        if kind is not None:
            assert fmt == "mds"  # the one streamed format of the four
            stream = Decompressed(fh, kind)
            out = mds.check(stream, None)
            stream.close()
            return f"{fmt}+{kind}", out
        path_checkers = {"megatron": megatron_indexed.check_path,
                         "mds-index": mds.check_index_path,
                         "hf-datasets": hf_cache.check_path}
        if fmt in path_checkers:
            return fmt, path_checkers[fmt](str(path))
        checker = {"arrow": arrow_ipc.check, "mds": mds.check}[fmt]
        return fmt, checker(fh, path.stat().st_size)


def test_registration_detects_by_content_and_checks_clean(
        arrow_dir: Path, hf_dirs: dict[str, Path], megatron: Path,
        mds_dirs: dict[str, Path]) -> None:
    roots = [arrow_dir, hf_dirs["saved"], hf_dirs["builder"], megatron.parent, *mds_dirs.values()]
    seen: dict[str, int] = {}
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            fmt, out = proposed_check(path)
            seen[fmt] = seen.get(fmt, 0) + 1
            if out is not None:
                assert out.bad == [] and out.unchecked_reason is None, (path, out.bad)
    assert seen == {"arrow": 5 + 3 + 1, "hf-datasets": 2, "megatron": 1, "mds": 3,
                    "mds+zstd": 3, "mds-index": 2, "other": 2}
    # other: the saved directory's dataset_info.json (no builder_name) and the .bin


def test_dataset_verify_dispatches_the_llm_formats(tmp_path: Path) -> None:
    """``dataset verify`` finds each format by content and reports it with its code."""
    from ckptrescue.datasets.verify import verify_dataset
    from fixtures import llm_datasets as fx

    root = tmp_path / "data"
    root.mkdir()
    fx.write_arrow(root / "train.arrow", stream=False)
    fx.write_arrow(root / "cut.arrow", stream=True)
    fx.truncate(root / "cut.arrow", (root / "cut.arrow").stat().st_size // 2)
    fx.write_megatron(root / "tokens")
    (root / "tokens.bin").unlink()
    fx.write_mds(root / "mds")
    result = verify_dataset(root)
    by = {f.rel.decode(): (f.format, f.status) for f in result.files}
    assert by["train.arrow"] == ("arrow", "ok")
    assert by["cut.arrow"] == ("arrow", "damaged")
    assert by["tokens.idx"] == ("megatron", "damaged")
    assert by["mds/index.json"][0] == "mds-index" and by["mds/index.json"][1] == "ok"
    assert all(status == "ok" for rel, (fmt, status) in by.items() if rel.startswith("mds/"))
    codes = {f.code for f in result.findings()}
    assert {"DS010", "DS011"} <= codes


def test_detect_loads_no_reader_for_a_file_of_no_known_format() -> None:
    """A manifest build asks ``detect`` about every file: one of no known format (here a
    block of 0xAB bytes) is answered from ``format_heads`` without importing the readers."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from ckptrescue.datasets.detect import detect\n"
            "assert detect('shard-00000.bin', bytes([0xAB]) * 512) == 'other'\n"
            "print(sorted(m for m in sys.modules if m.startswith('ckptrescue.datasets.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    for reader in ("arrow_ipc", "hf_cache", "mds", "megatron_indexed", "shardcheck"):
        assert f"'ckptrescue.datasets.{reader}'" not in out, out
    assert "'ckptrescue.datasets.format_heads'" in out
