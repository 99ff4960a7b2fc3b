""".npz zip oddities (issue 14): never silently unchecked, and "ok" only when numpy.load agrees.

numpy.load reads .npz through ``zipfile`` with ``allow_pickle=False`` (no code can run), so the
real loader is the oracle here, in-process.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from ckptrescue.datasets.npy import check_npz
from ckptrescue.datasets.verify import verify_dataset


def _npz(tmp_path: Path, *, compressed: bool = False) -> bytes:
    import numpy as np

    path = tmp_path / "src.npz"
    save = np.savez_compressed if compressed else np.savez
    save(path, x=np.arange(10, dtype=np.int64), y=np.arange(6, dtype=np.float32).reshape(2, 3))
    return path.read_bytes()


def _numpy_view(path: Path) -> dict[str, bytes] | None:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as d:
            return {k: d[k].tobytes() for k in d.files}
    except Exception:  # noqa: BLE001 - the oracle refusing is an answer
        return None


def _fields(data: bytes) -> list[tuple[str, int, str]]:
    """(label, offset, struct format) of every integer field of every zip header."""
    out: list[tuple[str, int, str]] = []
    lfmt = [(4, "<H"), (6, "<H"), (8, "<H"), (10, "<H"), (12, "<H"), (14, "<I"), (18, "<I"),
            (22, "<I"), (26, "<H"), (28, "<H")]
    cfmt = [(4, "<H"), (6, "<H"), (8, "<H"), (10, "<H"), (12, "<H"), (14, "<H"), (16, "<I"),
            (20, "<I"), (24, "<I"), (28, "<H"), (30, "<H"), (32, "<H"), (34, "<H"), (36, "<H"),
            (38, "<I"), (42, "<I")]
    efmt = [(4, "<H"), (6, "<H"), (8, "<H"), (10, "<H"), (12, "<I"), (16, "<I"), (20, "<H")]
    for sig, fmts, label in ((b"PK\x03\x04", lfmt, "local"), (b"PK\x01\x02", cfmt, "central"),
                             (b"PK\x05\x06", efmt, "eocd")):
        at = data.find(sig)
        while at >= 0:
            out.extend((f"{label}@{at}+{off}", at + off, fmt) for off, fmt in fmts)
            at = data.find(sig, at + 4)
    return out


def _check(path: Path):
    with path.open("rb") as fh:
        return check_npz(fh, path.stat().st_size)


@pytest.mark.parametrize("compressed", [False, True])
def test_every_header_field_extreme_values_agree_with_numpy(tmp_path, compressed):
    base = _npz(tmp_path, compressed=compressed)
    truth = _numpy_view(tmp_path / "src.npz")
    assert truth is not None
    path = tmp_path / "m.npz"
    for label, off, fmt in _fields(base):
        top = 0xFFFF if fmt == "<H" else 0xFFFFFFFF
        for value in {0, 1, 63, 64, 99, top, top - 15, top >> 1}:
            data = bytearray(base)
            struct.pack_into(fmt, data, off, value)
            path.write_bytes(bytes(data))
            out = _check(path)  # never raises
            ok = not out.bad and out.unchecked_reason is None and out.records == len(truth)
            if ok:
                assert _numpy_view(path) == truth, (label, value)


def test_changed_version_field_is_a_finding_not_unchecked(tmp_path):
    base = _npz(tmp_path)
    data = bytearray(base)
    struct.pack_into("<H", data, base.find(b"PK\x01\x02") + 6, 99)  # version needed: 9.9
    d = tmp_path / "ds"
    d.mkdir()
    (d / "arrays.npz").write_bytes(bytes(data))
    assert _numpy_view(d / "arrays.npz") is None
    result = verify_dataset(d)
    [f] = result.files
    assert f.status != "unchecked" and f.status != "ok"
    assert "zip file version" in f.bad_records[0].problem


def test_inflating_member_above_the_ratio_limit_is_refused_unread(tmp_path):
    import zipfile

    raw = b"\x93NUMPY\x01\x00v\x00" + b"{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }" \
        % (64 << 20)
    raw = raw.ljust(10 + 118, b" ")[:127] + b"\n"
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = c.compress(raw) + c.compress(bytes(64 << 20)) + c.flush()
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.npy", raw + bytes(64 << 20))
    data = bytearray(path.read_bytes())
    assert body  # the member above is deflated by zipfile itself
    # claim 2^40 bytes for it in the central directory and the local header (zip64 not needed
    # to lie: the 32-bit size says 0xFFFFFFF0)
    cd = data.find(b"PK\x01\x02")
    struct.pack_into("<I", data, cd + 24, 0xFFFFFFF0)
    struct.pack_into("<I", data, 22, 0xFFFFFFF0)
    path.write_bytes(bytes(data))
    out = _check(path)
    assert out.bad and "decompression limit" in out.bad[0].problem
