""".keras archives (issue 14): a deflated ``model.weights.h5`` is verified (bounded inflate,
CRC-32) and walked; what Python's zipfile (Keras' reader) refuses is never intact.

Archives are built by hand from bytes (an HDF5 weights file written by h5py from
``numpy.arange``); the oracle is ``zipfile`` + ``h5py`` (no code is loaded).
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

from ckptrescue.checkpoints.base import Verdict

from .conftest import probe1

GIB = 1 << 30


def _weights_h5() -> bytes:
    import h5py
    import numpy as np

    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        g = f.create_group("layers/dense/vars")
        g.create_dataset("0", data=np.arange(12, dtype=np.float32).reshape(3, 4))
        g.create_dataset("1", data=np.arange(4, dtype=np.float32))
    return buf.getvalue()


def _zip(members: list[tuple[str, bytes, int, int | None, int | None]]) -> bytes:
    """(name, stored bytes, method, crc override, uncompressed size override) -> a zip."""
    out, central = bytearray(), bytearray()
    for name, body, method, crc, usize in members:
        raw_crc = zlib.crc32(body) if crc is None else crc
        size = len(body) if usize is None else usize
        lho = len(out)
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, method, 0, 0x21, raw_crc,
                           len(body), size, len(name), 0) + name.encode() + body
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, method, 0,
                               0x21, raw_crc, len(body), size, len(name), 0, 0, 0, 0, 0,
                               lho) + name.encode()
    cd_off = len(out)
    out += central
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members), len(members),
                       len(central), cd_off, 0)
    return bytes(out)


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def _meta() -> list[tuple[str, bytes, int, None, None]]:
    return [("metadata.json", json.dumps({"keras_version": "3.0.0"}).encode(), 0, None, None),
            ("config.json", json.dumps({"class_name": "Sequential"}).encode(), 0, None, None)]


def _oracle(path: Path) -> dict[str, bytes] | None:
    """What Keras' readers give: zipfile reads the member (CRC checked), h5py the datasets."""
    import zipfile

    import h5py

    try:
        with zipfile.ZipFile(path) as z:
            raw = z.read("model.weights.h5")
        out: dict[str, bytes] = {}
        with h5py.File(io.BytesIO(raw), "r") as f:
            f.visititems(lambda n, o: out.__setitem__(n, o[()].tobytes())
                         if isinstance(o, h5py.Dataset) else None)
        return out
    except Exception:  # noqa: BLE001 - a refusal is the answer
        return None


def test_deflated_weights_are_inflated_and_walked(tmp_path):
    h5 = _weights_h5()
    path = tmp_path / "model.keras"
    path.write_bytes(_zip([*_meta(), ("model.weights.h5", _deflate(h5), 8, zlib.crc32(h5),
                                      len(h5))]))
    assert _oracle(path) is not None
    r = probe1(path)
    assert r.format == "keras" and r.verdict is Verdict.INTACT, r.findings
    assert len(r.tensors) == 2 and all(t.status == "ok" for t in r.tensors)
    assert all(t.offset is None for t in r.tensors)  # not at a file offset: salvage says why


def test_one_gib_of_zeros_with_a_fake_crc_is_damaged(tmp_path):
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    zero = bytes(64 << 20)
    body = b"".join(c.compress(zero) for _ in range(GIB // len(zero))) + c.flush()
    path = tmp_path / "model.keras"
    path.write_bytes(_zip([*_meta(), ("model.weights.h5", body, 8, 0xDEADBEEF, GIB)]))
    r = probe1(path)
    assert r.verdict is not Verdict.INTACT
    assert [f for f in r.findings if f.code == "KR010" and "CRC-32" in f.title]


def test_bomb_above_its_recorded_size_stops_there(tmp_path):
    """An entry that inflates past its recorded size is cut at size + 1 byte, never expanded."""
    body = _deflate(bytes(256 << 20))
    path = tmp_path / "model.keras"
    path.write_bytes(_zip([*_meta(), ("model.weights.h5", body, 8, 0, 1 << 20)]))
    r = probe1(path)
    assert [f for f in r.findings if f.code == "KR010" and "more than" in f.title]


def test_what_zipfile_refuses_is_never_intact(tmp_path):
    h5 = _weights_h5()
    good = _zip([*_meta(), ("model.weights.h5", h5, 0, None, None)])
    path = tmp_path / "model.keras"
    path.write_bytes(good)
    assert probe1(path).verdict is Verdict.INTACT
    cd = good.find(b"PK\x01\x02")
    for off, value in ((8, 1), (6, 99), (10, 99)):  # encrypted, version 9.9, method 99
        data = bytearray(good)
        struct.pack_into("<H", data, cd + off, value)
        path.write_bytes(bytes(data))
        r = probe1(path)
        assert r.verdict is not Verdict.INTACT, (off, value)
        assert [f for f in r.findings if f.code == "KR011"], (off, r.findings)
    data = bytearray(good)
    data[30] ^= 0x20  # the first local header's name differs from the central one
    path.write_bytes(bytes(data))
    r = probe1(path)
    assert [f for f in r.findings if f.code == "KR011"]
