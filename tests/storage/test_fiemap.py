"""FIEMAP and the range -> file intersection on real files of the test machine's filesystem."""

from __future__ import annotations

import itertools
import os

from ckptrescue.storage import fiemap
from ckptrescue.storage.locate import map_files
from fixtures.det import det_bytes


def _write(path, size):
    with open(path, "wb") as fh:
        fh.write(det_bytes(size, 1))
        fh.flush()
        os.fsync(fh.fileno())


def test_extents_match_the_file_size_and_are_disjoint(tmp_path):
    _write(tmp_path / "a.bin", 3 << 20)
    exts = fiemap.extents(tmp_path / "a.bin")
    assert exts and exts[-1].flags & fiemap.LAST
    assert sum(e.length for e in exts) >= 3 << 20
    spans = sorted((e.physical, e.physical + e.length) for e in exts)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    (tmp_path / "empty").write_bytes(b"")
    assert fiemap.extents(tmp_path / "empty") == []


def test_map_files_finds_each_range_in_its_file_only(tmp_path):
    root = tmp_path / "fs"
    (root / "sub").mkdir(parents=True)
    for name, size in (("a.bin", 1 << 20), ("sub/b.bin", 2 << 20), ("c.bin", 4096)):
        _write(root / name, size)
    ea = fiemap.extents(root / "a.bin")[0]
    eb = fiemap.extents(root / "sub" / "b.bin")[-1]
    ranges = sorted([(ea.physical + 4096, ea.physical + 8192),
                     (eb.physical + eb.length - 512, eb.physical + eb.length)])
    got = {(r.start, r.end): [(f.path, f.file_offset, f.length) for f in r.files]
           for r in map_files(root, ranges)}
    assert got[(ea.physical + 4096, ea.physical + 8192)] == [("a.bin", ea.logical + 4096, 4096)]
    assert got[(eb.physical + eb.length - 512, eb.physical + eb.length)] == [
        ("sub/b.bin", eb.logical + eb.length - 512, 512)]
