"""A TensorBundle tensor larger than a read segment is read on several threads (CRC32C of the
parts combined, numeric scans joined) and gives the findings of one sequential pass.

The bundle is written by ``bundlewriter`` (TensorFlow-free; its layout is checked against
TensorFlow's reader in ``test_tf_hostile``); values from numpy's seeded integer generator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import google_crc32c
import numpy as np

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.formats import streaming
from ckptrescue.checkpoints.formats.sstable import mask
from ckptrescue.checkpoints.formats.tensorbundle import probe_bundle

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bundlewriter import DT, Entry, write_bundle  # noqa: E402


def _bundle(prefix: Path, *, flip: int | None, bad_crc: bool) -> tuple[int, int]:
    rng = np.random.default_rng(11)
    small = (rng.integers(-64, 64, 1000) * 2.0 ** -8).astype(np.float32).tobytes()
    big = (rng.integers(-1024, 1024, (4, 3 << 20)).sum(axis=0) * 2.0 ** -16).astype(np.float32)
    raw = bytearray(big.tobytes())
    if flip is not None:  # flipped before the save computed its CRC32C (a flip in memory)
        raw[4 * flip + 3] ^= 0x40  # bit 30 of element ``flip``: an exponent flip
    crc = mask(int(google_crc32c.extend(0, bytes(raw))))
    if bad_crc:
        crc ^= 1
    head = len(small) + 12  # the big tensor starts unaligned to any chunk or segment
    data = small + bytes(12) + bytes(raw)
    entries = [
        Entry(b"a/.ATTRIBUTES/VARIABLE_VALUE", DT["float32"], (1000,), 0, 0, len(small),
              mask(int(google_crc32c.extend(0, small)))),
        Entry(b"b/.ATTRIBUTES/VARIABLE_VALUE", DT["float32"], (3 << 20,), 0, head, len(raw),
              crc),
    ]
    write_bundle(prefix, 0, entries=entries, data=data)
    return head, len(raw)


def _probe(prefix: Path, monkeypatch, *, threads: str, segment: int):
    monkeypatch.setattr(streaming, "SEGMENT", segment)
    monkeypatch.setenv("CKPTRESCUE_THREADS", threads)
    return probe_bundle(prefix, ProbeOptions(numeric=True))


def test_a_large_tensor_in_parallel_segments_equals_one_pass(tmp_path, monkeypatch):
    prefix = tmp_path / "ckpt"
    head, size = _bundle(prefix, flip=(5 << 20) // 4 + 3, bad_crc=False)
    one = _probe(prefix, monkeypatch, threads="1", segment=1 << 40)
    many = _probe(prefix, monkeypatch, threads="3", segment=2 << 20)
    assert one.verdict is many.verdict is Verdict.SUSPECT  # bytes as saved; one value is not
    assert [(f.code, f.offset, f.details) for f in one.findings] == \
        [(f.code, f.offset, f.details) for f in many.findings]
    nm2 = next(f for f in many.findings if f.code == "NM002")
    assert nm2.offset == head + 4 * ((5 << 20) // 4 + 3) and nm2.details["flip_bit"] == 30
    assert many.suspect_tensors == ["b/.ATTRIBUTES/VARIABLE_VALUE"] and not many.damaged_tensors


def test_parts_of_an_intact_tensor_combine_to_its_crc32c(tmp_path, monkeypatch):
    prefix = tmp_path / "ckpt"
    _bundle(prefix, flip=None, bad_crc=False)
    many = _probe(prefix, monkeypatch, threads="3", segment=2 << 20)
    assert many.verdict is Verdict.INTACT
    prefix2 = tmp_path / "ckpt2"
    _bundle(prefix2, flip=None, bad_crc=True)
    bad = _probe(prefix2, monkeypatch, threads="3", segment=2 << 20)
    assert bad.verdict is Verdict.DAMAGED and bad.damaged_tensors == ["b/.ATTRIBUTES/VARIABLE_VALUE"]
