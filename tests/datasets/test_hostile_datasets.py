"""Hostile and real-world dataset containers (issue 14): bounded work, no swallowed errors.

Every input is generated here from integers (no clock, no CPU-dependent math). Reproducers:
a deeply nested JSON line, a gzip bomb, a pax ``size=2**70`` member, gzip TFRecords under their
usual shard names, numpy's own Python-2 ``.npy`` header, and zstd without its module.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import struct
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import invoke

from ckptrescue.checkpoints.formats.crc32c import crc32c, mask
from ckptrescue.datasets import decompress
from ckptrescue.datasets.verify import verify_dataset

REPO = Path(__file__).resolve().parents[2]


def _tfrecord(n: int) -> bytes:
    out = bytearray()
    for i in range(n):
        data = bytes((i * 7 + k) % 256 for k in range(10 + i))
        length = struct.pack("<Q", len(data))
        out += length + struct.pack("<I", mask(crc32c(length))) + data
        out += struct.pack("<I", mask(crc32c(data)))
    return bytes(out)


def _one(root: Path):  # noqa: ANN202
    result = verify_dataset(root)
    [f] = result.files
    return result, f


def _cli(*argv: str) -> tuple[int, str]:
    proc = invoke(*argv)
    return proc.returncode, proc.stdout


def test_deeply_nested_jsonl_is_not_called_checked(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    deep = "[" * 50_000 + "]" * 50_000
    (root / "x.jsonl").write_text('{"a": 1}\n' + deep + "\n" + '{"b": 2}\n')
    result, f = _one(root)
    assert f.status == "unchecked" and "nested deeper" in f.note and "line(s) 2" in f.note
    assert f.records == 2 and not result.ok
    assert "could NOT be checked" in result.answer()
    assert [x.code for x in result.findings()] == ["DS008"]
    code, out = _cli("dataset", "verify", str(root), "--json")
    data = json.loads(out)
    assert code == 1
    assert data["files"][0]["note"] == f.note and data["files"][0]["status"] == "unchecked"


def test_a_damaged_line_next_to_a_deep_one_is_still_damage(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    (root / "x.jsonl").write_text("[" * 2000 + "]" * 2000 + "\n{broken\n")
    _, f = _one(root)
    assert f.status == "damaged" and f.bad_records[0].index == 1


def test_gzip_bomb_stops_at_the_ratio_limit(tmp_path: Path) -> None:
    """A few hundred KB of gzip inflating to 200 MB: stopped at 64 MiB, in seconds."""
    root = tmp_path / "d"
    root.mkdir()
    line = b'{"a": "' + b"x" * (1 << 20) + b'"}\n'
    with gzip.GzipFile(root / "bomb.jsonl.gz", "wb", compresslevel=1, mtime=0) as gz:
        for _ in range(200):
            gz.write(line)
    assert (root / "bomb.jsonl.gz").stat().st_size < 2 << 20
    started = time.monotonic()
    result, f = _one(root)
    assert time.monotonic() - started < 30
    assert f.status == "unchecked" and f.limit and "decompression bomb" in f.note
    assert 0 < f.records < 200
    assert [x.code for x in result.findings()] == ["DS009"] and not result.ok


def test_absolute_output_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decompress, "MAX_OUTPUT", 1 << 20)
    root = tmp_path / "d"
    root.mkdir()
    payload = b"".join(json.dumps({"i": i, "v": i * 3}).encode() + b"\n" for i in range(200_000))
    (root / "x.jsonl.gz").write_bytes(gzip.compress(payload, mtime=0))
    _, f = _one(root)
    assert f.status == "unchecked" and f.limit and "passed 1048576 bytes" in f.note


def test_gzip_tfrecord_under_its_shard_name_is_checked(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    raw = _tfrecord(12)
    (root / "data_tfrecord-00000-of-00012.gz").write_bytes(gzip.compress(raw, mtime=0))
    (root / "same.tfrecord.gz").write_bytes(gzip.compress(raw, mtime=0))
    bad = bytearray(raw)
    bad[40] ^= 1
    (root / "data_tfrecord-00001-of-00012.gz").write_bytes(gzip.compress(bytes(bad), mtime=0))
    by = {f.rel.decode(): f for f in verify_dataset(root).files}
    for name in ("data_tfrecord-00000-of-00012.gz", "same.tfrecord.gz"):
        assert (by[name].format, by[name].status, by[name].records) == \
            ("tfrecord+gzip", "ok", 12)
    assert by["data_tfrecord-00001-of-00012.gz"].status == "damaged"


@pytest.mark.parametrize("kind", ["bz2", "xz"])
def test_other_compressions_are_checked(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "d"
    root.mkdir()
    raw = _tfrecord(5)
    packed = bz2.compress(raw) if kind == "bz2" else lzma.compress(raw)
    (root / f"shard-00000-of-00001.{kind}").write_bytes(packed)
    _, f = _one(root)
    assert (f.format, f.status, f.records) == (f"tfrecord+{kind}", "ok", 5)


def test_zstd_without_its_module_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "zstandard", None)  # as on a machine without it
    root = tmp_path / "d"
    root.mkdir()
    (root / "x.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(40))
    result, f = _one(root)
    assert f.status == "unchecked" and "zstandard" in f.note and not result.ok


def _pax_tar(size_record: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("sample0001.txt")
        info.size, info.mtime = 5, 0
        info.pax_headers = {"size": size_record}
        tar.addfile(info, io.BytesIO(b"hello"))
        info2 = tarfile.TarInfo("sample0002.txt")
        info2.size, info2.mtime = 3, 0
        tar.addfile(info2, io.BytesIO(b"abc"))
    return buf.getvalue()


def test_pax_size_of_2_pow_70_is_damage_not_ok(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    (root / "s.tar").write_bytes(_pax_tar(str(2 ** 70)))
    try:  # the real reader believes the pax size (and then fails seeking past it)
        with tarfile.open(root / "s.tar") as tar:
            assert tar.getmembers()[0].size == 2 ** 70
    except (ValueError, tarfile.TarError):
        pass
    _, f = _one(root)
    assert f.status == "damaged" and f.bad_records[0].key == "sample0001"
    assert str(2 ** 70) in f.bad_records[0].problem


def test_pax_size_is_honoured_when_true(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    (root / "s.tar").write_bytes(_pax_tar("5"))
    _, f = _one(root)
    assert (f.status, f.records) == ("ok", 2)


def test_gnu_base256_size_past_the_end(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("sample0001.txt")
        info.size, info.mtime = 5, 0
        tar.addfile(info, io.BytesIO(b"hello"))
    raw = bytearray(buf.getvalue())
    raw[124:136] = b"\x80" + (2 ** 80).to_bytes(11, "big")
    raw[148:156] = b" " * 8
    raw[148:156] = f"{sum(raw[:512]):06o}\0 ".encode()
    (root / "s.tar").write_bytes(bytes(raw))
    _, f = _one(root)
    assert f.status == "damaged" and str(2 ** 80) in f.bad_records[0].problem


def _py2_npy(values: list[int]) -> bytes:
    """A version 1.0 .npy exactly as numpy under Python 2 wrote it (longs as ``2L``)."""
    text = "{'descr': '<i8', 'fortran_order': False, 'shape': (" + f"{len(values)}L,), }}"
    pad = 64 - (10 + len(text) + 1) % 64
    text += " " * pad + "\n"
    return (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin-1")
            + np.array(values, dtype="<i8").tobytes())


def test_python2_npy_header_reads_as_numpy_reads_it(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    raw = _py2_npy([3, 4])
    (root / "py2.npy").write_bytes(raw)
    with pytest.warns(UserWarning):
        assert np.load(io.BytesIO(raw)).tolist() == [3, 4]
    _, f = _one(root)
    assert (f.status, f.records) == ("ok", 1)
    (root / "py2.npy").write_bytes(raw[:-1])
    _, f = _one(root)
    assert f.status == "damaged"


@pytest.mark.parametrize("text, loads", [
    ("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), 'extra': 1}", False),
    ("{'descr': '<i8', 'fortran_order': 0, 'shape': (2,)}", False),
    ("{'descr': '<i8', 'fortran_order': False, 'shape': [2]}", False),
    ("{'descr': '<i8', 'fortran_order': False, 'shape': (2,)}", True),
])
def test_npy_header_rules_agree_with_numpy(tmp_path: Path, text: str, loads: bool) -> None:
    text += " " * (64 - (10 + len(text) + 1) % 64) + "\n"
    raw = (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()
           + np.arange(2, dtype="<i8").tobytes())
    try:
        np.load(io.BytesIO(raw))
        numpy_ok = True
    except ValueError:
        numpy_ok = False
    assert numpy_ok is loads
    root = tmp_path / "d"
    root.mkdir()
    (root / "a.npy").write_bytes(raw)
    _, f = _one(root)
    assert (f.status == "ok") is loads


def test_compressed_npy_is_checked_through_the_stream(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    buf = io.BytesIO()
    np.save(buf, np.arange(100, dtype="<i4"))
    (root / "a.npy.gz").write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    (root / "b.npy.gz").write_bytes(gzip.compress(buf.getvalue()[:-4], mtime=0))
    by = {f.rel.decode(): f for f in verify_dataset(root).files}
    assert (by["a.npy.gz"].format, by["a.npy.gz"].status) == ("npy+gzip", "ok")
    assert by["b.npy.gz"].status == "damaged"


def test_a_zstd_jsonl_shard_is_verified_line_by_line(tmp_path: Path) -> None:
    import zstandard

    root = tmp_path / "d"
    root.mkdir()
    lines = [json.dumps({"id": i}).encode() for i in range(50)]
    lines[17] = b'{"id": '
    (root / "x.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(lines)))
    result, f = _one(root)
    assert (f.format, f.status) == ("jsonl+zstd", "damaged") and not result.ok
    assert [b.index for b in f.bad_records] == [17]
