"""Checkpoints in tar archives (issue 28): ``.tar``, ``.tar.gz``/``.tgz`` and ``.tar.zst`` written
by ``tarfile`` and ``zstandard`` around real ``torch.save`` files are walked in place, member by
member, decided by content (never by suffix), and never extracted (no temporary copy, the
evidence unchanged)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from ckptrescue.checkpoints.base import Verdict
from fixtures import malicious as mal

from .conftest import probe1, tree_hash

W_BYTES_AT = 4000  # a byte inside tensor model.w's storage


def _state():
    import torch

    return {"model": {"w": torch.arange(6000, dtype=torch.float32).reshape(60, 100),
                      "b": torch.arange(5, dtype=torch.int64)}, "step": 3}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, bytes]:
    import torch

    out = {}
    for name, state in (("step-1.pt", _state()),
                        ("step-2.pt", {"model": {"w": torch.arange(60, dtype=torch.float32)}})):
        buf = io.BytesIO()
        torch.save(state, buf)
        out[name] = buf.getvalue()
    return out


def _tar(path: Path, members: dict[str, bytes], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tf.addfile(info, io.BytesIO(data))
    return path


def _zst(path: Path, raw: bytes) -> Path:
    import zstandard

    path.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(raw))
    return path


def _flipped(data: bytes) -> bytes:
    import torch

    needle = torch.arange(6000, dtype=torch.float32).numpy().tobytes()[W_BYTES_AT:W_BYTES_AT + 16]
    out = bytearray(data)
    out[out.find(needle)] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "tgz", "tar.zst"])
def test_intact_checkpoint_in_an_archive_is_intact(saved, tmp_path, kind, monkeypatch):
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    plain = _tar(tmp_path / "a.tar", {"step-1.pt": saved["step-1.pt"]})
    if kind == "tar":
        path = plain
    elif kind == "tar.zst":
        path = _zst(tmp_path / "ckpt.tar.zst", plain.read_bytes())
    else:
        path = _tar(tmp_path / f"ckpt.{kind}", {"step-1.pt": saved["step-1.pt"]}, "w:gz")
    before = tree_hash(path)
    r = probe1(path)
    assert r.format == "tar" and r.verdict is Verdict.INTACT, r.findings
    assert {t.name: (t.dtype, t.shape) for t in r.tensors} == {
        "model.w": ("float32", (60, 100)), "model.b": ("int64", (5,))}
    assert r.extra["tar"]["compressed"] == (kind != "tar")
    assert tree_hash(path) == before
    assert not list(scratch.iterdir())  # nothing was extracted


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "tar.zst"])
def test_one_flipped_tensor_byte_is_damage_naming_the_tensor(saved, tmp_path, kind):
    members = {"step-1.pt": _flipped(saved["step-1.pt"]), "step-2.pt": saved["step-2.pt"]}
    plain = _tar(tmp_path / "a.tar", members)
    path = {"tar": lambda: plain,
            "tar.gz": lambda: _tar(tmp_path / "c.tar.gz", members, "w:gz"),
            "tar.zst": lambda: _zst(tmp_path / "c.tar.zst", plain.read_bytes())}[kind]()
    r = probe1(path)
    assert r.verdict is Verdict.DAMAGED, r.findings
    assert r.damaged_tensors == ["step-1.pt/model.w"]
    assert {f.code for f in r.findings} >= {"TZ002", "TA004"}
    checkpoints = {c["name"]: c["verdict"] for c in r.extra["tar"]["checkpoints"]}
    assert checkpoints == {"step-1.pt": "damaged", "step-2.pt": "intact"}


def test_salvage_reads_a_plain_tar_in_place(saved, tmp_path):
    from safetensors.numpy import load_file

    from ckptrescue.checkpoints.salvage import salvage

    (tmp_path / "in").mkdir()
    path = _tar(tmp_path / "in" / "ckpt.tar", {"step-1.pt": _flipped(saved["step-1.pt"])})
    res = salvage(path, tmp_path / "out")
    assert res.recovered == ["model.b"] and [x["name"] for x in res.lost] == ["model.w"]
    got = load_file(res.output)
    assert got["model.b"].tolist() == [0, 1, 2, 3, 4]


def test_wrong_gzip_crc_and_zstd_checksum_are_damage(saved, tmp_path):
    gz = bytearray(_tar(tmp_path / "c.tar.gz", {"step-1.pt": saved["step-1.pt"]},
                        "w:gz").read_bytes())
    gz[-8] ^= 0xFF  # the gzip trailer's CRC-32
    bad_gz = tmp_path / "bad.tar.gz"
    bad_gz.write_bytes(bytes(gz))
    r = probe1(bad_gz)
    assert r.verdict is Verdict.DAMAGED and "TA003" in {f.code for f in r.findings}

    zst = bytearray(_zst(tmp_path / "c.tar.zst",
                         _tar(tmp_path / "p.tar", {"s.pt": saved["step-1.pt"]}).read_bytes())
                    .read_bytes())
    zst[-1] ^= 0xFF  # the frame's content checksum
    bad_zst = tmp_path / "bad.tar.zst"
    bad_zst.write_bytes(bytes(zst))
    r = probe1(bad_zst)
    assert r.verdict is Verdict.DAMAGED and "TA003" in {f.code for f in r.findings}


def test_cut_archive_is_truncated(saved, tmp_path):
    raw = _tar(tmp_path / "a.tar", {"step-1.pt": saved["step-1.pt"]}).read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(raw[: len(raw) // 2])
    r = probe1(cut)
    assert r.verdict is Verdict.TRUNCATED and "TA002" in {f.code for f in r.findings}


def test_zero_block_hiding_members_is_damage(saved, tmp_path):
    raw = bytearray(_tar(tmp_path / "a.tar", {"step-2.pt": saved["step-2.pt"],
                                              "step-1.pt": saved["step-1.pt"]}).read_bytes())
    hidden = raw.find(b"step-1.pt")  # the second member's header
    start = hidden - hidden % 512
    path = tmp_path / "z.tar"
    path.write_bytes(bytes(raw[:start]) + bytes(512) + bytes(raw[start:]))
    with tarfile.open(path) as tf:  # what a reader that stops at a zero block sees
        assert tf.getnames() == ["step-2.pt"]
    r = probe1(path)
    assert r.verdict is Verdict.DAMAGED and "TA001" in {f.code for f in r.findings}


def test_decided_by_content_not_by_suffix(saved, tmp_path):
    zip_named_tar = tmp_path / "model.pth.tar"
    zip_named_tar.write_bytes(saved["step-1.pt"])
    r = probe1(zip_named_tar)
    assert r.format == "torch-zip" and r.verdict is Verdict.INTACT
    tar_named_pt = _tar(tmp_path / "step.pt", {"step-1.pt": saved["step-1.pt"]}, "w:gz")
    r = probe1(tar_named_pt)
    assert r.format == "tar" and r.verdict is Verdict.INTACT


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_a_payload_inside_an_archive_is_unsafe(tmp_path, mode):
    marker = tmp_path / "MARKER"
    evil_zip = mal.torch_zip(tmp_path / "evil.pt", mal.payload("os.system", marker=marker))
    evil_pkl = b"\x80\x02" + mal.payload("builtins.exec", marker=marker) + b"."
    for name, data in (("evil.pt", evil_zip.read_bytes()), ("state.pkl", evil_pkl)):
        path = _tar(tmp_path / f"{name}.tar{'.gz' if mode == 'w:gz' else ''}", {name: data},
                    mode)
        r = probe1(path)
        assert r.verdict is Verdict.UNSAFE, (name, r.findings)
        assert "PK001" in {f.code for f in r.findings}
    assert not marker.exists()
