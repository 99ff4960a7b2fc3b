"""``dataset verify`` judged by the reader that defines ``ok`` for each container (docs/datasets.md):
zstandard's and gzip's own checks for compressed streams, WebDataset's streaming tar reader,
``tf.data`` for TFRecord, ``pq.read_table`` for Parquet. Every file is written by the real library
and damaged the way the fuzz pass found the kit disagreeing with the reader; each real reader runs
as the oracle (``tf.data`` and pyarrow in child processes)."""

from __future__ import annotations

import gzip
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from ckptrescue.datasets.verify import verify_dataset
from fixtures.datasets import tar_member_offsets, write_parquet, write_webdataset_tar

REPO = Path(__file__).resolve().parents[2]


def by_name(root: Path) -> dict[str, object]:
    return {os.fsdecode(f.rel): f for f in verify_dataset(root).files}


def child(code: str, *args: str) -> str:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=REPO)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("ORACLE"):])


def test_zstd_frame_failing_its_checksum_is_named_with_its_lines(tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard")
    lines = [json.dumps({"id": i, "text": f"line {i}"}).encode() + b"\n" for i in range(200)]
    comp = zstandard.ZstdCompressor(write_checksum=True)
    frames = [comp.compress(b"".join(lines[k:k + 20])) for k in range(0, 200, 20)]
    bad = bytearray(frames[7])
    bad[-1] ^= 0xFF  # the frame's XXH64 content checksum
    frames[7] = bytes(bad)
    (tmp_path / "a.jsonl.zst").write_bytes(b"".join(frames))
    with pytest.raises(zstandard.ZstdError):  # the reader refuses the file
        zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(b"".join(frames)), read_across_frames=True).read()
    f = by_name(tmp_path)["a.jsonl.zst"]
    assert f.status == "damaged", f.note
    start = sum(len(x) for x in frames[:7])
    (rec,) = f.bad_records
    assert rec.offset == start and rec.index is None  # the whole file is quarantined
    assert rec.problem.startswith(f"zstd frame 7 (compressed bytes {start}-"
                                  f"{start + len(frames[7]) - 1}): fails its content checksum")
    assert rec.problem.endswith("it held lines 141-160")
    assert f.records == 200  # the frames after it were read on, with the right numbers
    # a frame that cannot be decoded at all: named, and the lines from there on are lost
    cut = b"".join(frames[:3]) + frames[3][:9] + b"\xff" * 40
    (tmp_path / "a.jsonl.zst").write_bytes(cut)
    f = by_name(tmp_path)["a.jsonl.zst"]
    assert f.status == "damaged"
    assert any(r.problem.startswith(f"zstd frame 3 (compressed bytes from "
                                    f"{sum(len(x) for x in frames[:3])})") and
               "lines from 61 on are lost" in r.problem for r in f.bad_records), f.bad_records


def test_every_compressed_container_decoder_error_is_damage(tmp_path: Path) -> None:
    import bz2
    import lzma

    body = b"".join(json.dumps({"i": i}).encode() + b"\n" for i in range(3000))
    xz = bytearray(lzma.compress(body))
    xz[len(xz) // 2] ^= 0x10
    (tmp_path / "a.jsonl.xz").write_bytes(bytes(xz))
    bz = bytearray(bz2.compress(body))
    bz[len(bz) // 2] ^= 0x10
    (tmp_path / "b.jsonl.bz2").write_bytes(bytes(bz))
    gz = bytearray(gzip.compress(body, mtime=0))
    gz[-8] ^= 0x01  # the CRC-32 of the member
    (tmp_path / "c.jsonl.gz").write_bytes(bytes(gz))
    for name, opener in (("a.jsonl.xz", lzma.open), ("b.jsonl.bz2", bz2.open),
                         ("c.jsonl.gz", gzip.open)):
        with pytest.raises(Exception), opener(tmp_path / name) as fh:  # noqa: B017, PT011
            fh.read()
    files = by_name(tmp_path)
    for name in ("a.jsonl.xz", "b.jsonl.bz2", "c.jsonl.gz"):
        assert files[name].status == "damaged", (name, files[name].note)
        assert "internal error" not in files[name].note
    assert any("gzip member 0 (compressed bytes 0-" in r.problem and "fails its CRC-32" in
               r.problem and "it held lines 1-3000" in r.problem
               for r in files["c.jsonl.gz"].bad_records)


WDS = """
import json, sys, gzip
from webdataset.tariterators import tar_file_iterator
out = {}
for f in sys.argv[1:]:
    n = 0
    with open(f, "rb") as fh:
        for _sample in tar_file_iterator(fh):
            n += 1
    out[f] = n
print("ORACLE" + json.dumps(out))
"""


def test_tar_members_a_streaming_reader_silently_loses(tmp_path: Path) -> None:
    pytest.importorskip("webdataset")
    good = tmp_path / "good.tar"
    write_webdataset_tar(good)
    offsets = sorted(tar_member_offsets(good).values())
    data = good.read_bytes()
    # a member size that swallows the next header (and lands on zero data)
    swallow = bytearray(data)
    info = tarfile.TarInfo.frombuf(bytes(swallow[:512]), "utf-8", "surrogateescape")
    swallow[124:136] = f"{info.size + 1024:011o}\0".encode()
    chk = sum(swallow[:148]) + 8 * 32 + sum(swallow[156:512])
    swallow[148:156] = f"{chk:06o}\0 ".encode()
    # a zero block where the 13th member's header was
    zero = bytearray(data)
    zero[offsets[12]:offsets[12] + 512] = bytes(512)
    root = tmp_path / "shards"
    root.mkdir()
    (root / "swallow.tar").write_bytes(bytes(swallow))
    (root / "zero.tar").write_bytes(bytes(zero))
    (root / "good.tar").write_bytes(data)
    seen = child(WDS, *(str(root / n) for n in ("good.tar", "swallow.tar", "zero.tar")))
    assert seen[str(root / "good.tar")] == 24
    assert seen[str(root / "swallow.tar")] < 24 and seen[str(root / "zero.tar")] == 12
    files = by_name(root)
    assert files["good.tar"].status == "ok"
    for name in ("swallow.tar", "zero.tar"):
        assert files[name].status == "damaged", (name, files[name].bad_records)
    swallowed = files["swallow.tar"].bad_records[0]
    assert swallowed.problem.startswith("member 'sample00000.txt': its size (1034) runs over "
                                        f"a valid member header at offset {offsets[1]}")
    assert "ends the archive for streaming readers" in files["zero.tar"].bad_records[0].problem
    assert files["zero.tar"].bad_records[0].offset == offsets[12]


def test_tar_gz_with_a_wrong_gzip_crc(tmp_path: Path) -> None:
    shard = tmp_path / "s.tar"
    write_webdataset_tar(shard)
    gz = bytearray(gzip.compress(shard.read_bytes(), mtime=0))
    gz[-8] ^= 0x01
    shard.unlink()
    (tmp_path / "s.tar.gz").write_bytes(bytes(gz))
    with pytest.raises(gzip.BadGzipFile):
        gzip.decompress(bytes(gz))
    f = by_name(tmp_path)["s.tar.gz"]
    assert f.status == "damaged" and f.records == 24  # every member read, then the CRC fails
    assert any(r.problem.startswith(f"gzip member 0 (compressed bytes 0-{len(gz) - 1}): fails "
                                    "its CRC-32") for r in f.bad_records), f.bad_records


TFDATA = """
import gc, json, sys
gc.disable()  # what the import makes lives to the end: no collection walks it
import tensorflow as tf
gc.freeze()
gc.enable()
out = {}
for f in sys.argv[1:]:
    try:
        out[f] = sum(1 for _ in tf.data.TFRecordDataset(f, compression_type="GZIP"))
    except tf.errors.DataLossError as exc:
        out[f] = "DataLossError"
print("ORACLE" + json.dumps(out))
"""


def test_gzip_tfrecord_followed_by_zeros(tmp_path: Path, tf_tfrecord: Path) -> None:
    packed = gzip.compress(tf_tfrecord.read_bytes(), mtime=0)
    (tmp_path / "ok.tfrecord.gz").write_bytes(packed)
    (tmp_path / "padded.tfrecord.gz").write_bytes(packed + bytes(1024))
    seen = child(TFDATA, str(tmp_path / "ok.tfrecord.gz"), str(tmp_path / "padded.tfrecord.gz"))
    assert seen[str(tmp_path / "ok.tfrecord.gz")] == 40
    assert seen[str(tmp_path / "padded.tfrecord.gz")] == "DataLossError"
    assert gzip.decompress(packed + bytes(1024))  # Python's gzip skips the padding
    files = by_name(tmp_path)
    assert files["ok.tfrecord.gz"].status == "ok"
    bad = files["padded.tfrecord.gz"]
    assert bad.status == "damaged"
    assert bad.bad_records[0].offset == len(packed)
    assert "tf.data stops there with a DataLossError" in bad.bad_records[0].problem


# The footer-flip oracle runs pyarrow in fresh processes, never in forked ones: importing pyarrow
# starts native threads (and read_table more), and a process forked while one of them held a lock
# could wait forever (a full run once hung on it). A flip that makes pyarrow abort ends only that
# process: the next one starts after the case that took it down.
FLIP_CASES = """
import io, os, struct, sys
import pyarrow.parquet as pq
data = open(sys.argv[1], "rb").read()
first = int(sys.argv[2])
(flen,) = struct.unpack("<I", data[-8:-4])
start = len(data) - 8 - flen
out = os.fdopen(1, "w", buffering=1)
for case in range(first, (flen) * 8):
    pos, bit = start + case // 8, case % 8
    out.write(f"BEGIN {case} {pos} {bit}\\n")
    d = bytearray(data); d[pos] ^= 1 << bit; d = bytes(d)
    try:
        pq.ParquetFile(io.BytesIO(d))  # the footer still parses ...
        try:
            pq.read_table(io.BytesIO(d))
            res = "ok"
        except Exception:
            res = "refused"  # ... but read_table refuses the file
    except Exception:
        res = "footer"
    out.write(f"RESULT {case} {res}\\n")
out.write("DONE\\n")
os._exit(0)  # pyarrow's threads can abort an orderly interpreter exit
"""


def footer_flips(src: Path, wanted: int = 6) -> list[list[int]]:
    """The footer bits whose flip leaves a footer that parses but a file ``read_table`` refuses,
    in file order, up to the end of the byte holding the ``wanted``-th one (every bit of that
    byte is tried, as a responder's table of one byte's flips would be)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    found: list[list[int]] = []
    case, last_pos = 0, None
    while True:
        proc = subprocess.Popen([sys.executable, "-c", FLIP_CASES, str(src), str(case)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=env, cwd=REPO)
        assert proc.stdout is not None
        begun = None
        watchdog = threading.Timer(300, proc.kill)  # a hang fails the test, never skips a case
        watchdog.start()
        try:
            for line in proc.stdout:
                word, *rest = line.split()
                if word == "BEGIN":
                    begun, pos, bit = (int(x) for x in rest)
                    if last_pos is not None and pos != last_pos and len(found) >= wanted:
                        return found
                    last_pos = pos
                elif word == "RESULT" and rest[1] == "refused":
                    found.append([last_pos, begun % 8])
                elif word == "DONE":
                    return found
        finally:
            timed_out = not watchdog.is_alive()
            watchdog.cancel()
            proc.kill()
            proc.wait(timeout=60)
        assert not timed_out, f"the oracle process hung at case {begun}"
        assert begun is not None, "the oracle process ended before its first case"
        case = begun + 1  # that case took the process down: go on after it


VERIFY = """
import json, sys
from ckptrescue.datasets.verify import verify_dataset
r = verify_dataset(sys.argv[1], jobs=1)
print("ORACLE" + json.dumps({f.rel.decode(): [f.status, [b.problem for b in f.bad_records]]
                             for f in r.files}))
"""


def test_parquet_footer_bit_flips_read_table_refuses(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    src = tmp_path / "src.parquet"
    write_parquet(src)
    flips = footer_flips(src)
    assert flips, "no footer flip that read_table refuses"
    root = tmp_path / "d"
    root.mkdir()
    data = src.read_bytes()
    for pos, bit in flips:
        d = bytearray(data)
        d[pos] ^= 1 << bit
        (root / f"f{pos}_{bit}.parquet").write_bytes(bytes(d))
    # in a child: pyarrow must never take the verifying process down with it
    seen = child(VERIFY, str(root))
    assert len(seen) == len(flips)
    for name, (status, problems) in seen.items():
        assert status == "damaged", (name, problems)


def test_footer_reader_agrees_with_pyarrow(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from ckptrescue.datasets import parquet_footer

    path = tmp_path / "x.parquet"
    write_parquet(path)
    data = path.read_bytes()
    (flen,) = struct.unpack("<I", data[-8:-4])
    groups = parquet_footer.row_groups(data[-8 - flen:-8])
    meta = pq.ParquetFile(path).metadata
    assert [g.num_rows for g in groups] == [meta.row_group(i).num_rows
                                            for i in range(meta.num_row_groups)]
    for i, g in enumerate(groups):
        rg = meta.row_group(i)
        want = {}
        for c in range(rg.num_columns):
            col = rg.column(c)
            want[col.path_in_schema] = col.dictionary_page_offset or col.data_page_offset
        assert g.offsets == want
