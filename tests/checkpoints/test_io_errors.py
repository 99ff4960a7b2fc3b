"""Checkpoints on media with unreadable sectors, read live (not from an image): the kernel
returns EIO for every read(2) touching them (a FUSE view with chosen bad byte ranges,
fixtures/faultyfs.py). The probe must not give up on the file: it names the tensors whose
bytes are unreadable (IO001) and still verifies the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import storage as fx

pytestmark = [pytest.mark.privileged]
TARGET = "0.weight"  # Linear(256, 512).weight: the only 524288-byte storage


@pytest.fixture
def fuse_ok():
    if not Path("/dev/fuse").exists():
        pytest.skip("no /dev/fuse")
    pytest.importorskip("fuse", reason="fusepy (and libfuse2) not installed")


def _checkpoint(tmp_path):
    pytest.importorskip("torch")
    src = tmp_path / "src"
    src.mkdir()
    ckpt = fx.torch_checkpoint(src / "model.pt")
    members = fx.zip_member_data_offsets(ckpt)
    off, size = next(v for k, v in members.items() if "/data/" in k and v[1] == 512 * 256 * 4)
    lo = (off + size // 2) // 4096 * 4096  # one 4 KiB unit inside the tensor's bytes
    return src, (lo, lo + 4096)


def test_probe_names_the_tensor_behind_an_io_error(fuse_ok, tmp_path):
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    src, bad = _checkpoint(tmp_path)
    before = fx.sha256(src / "model.pt")
    with fx.faulty_mount(src, {"model.pt": [bad]}) as mnt:
        with pytest.raises(OSError), open(mnt / "model.pt", "rb") as fh:
            fh.read()  # the kernel really refuses those bytes
        (rep,) = probe_paths([mnt / "model.pt"])
    assert rep.verdict == "damaged"
    assert rep.damaged_tensors == [TARGET]
    io = [f for f in rep.findings if f.code == "IO001"]
    assert len(io) == 1 and io[0].details["ranges"] == [list(bad)]
    assert io[0].tensors == (TARGET,)
    others = [t for t in rep.tensors if t.name != TARGET]
    assert others and all(t.status == "ok" for t in others)
    assert fx.sha256(src / "model.pt") == before


def test_cli_probe_of_a_live_mount_with_io_errors(fuse_ok, tmp_path):
    src, bad = _checkpoint(tmp_path)
    cli = str(Path(sys.executable).with_name("ckptrescue"))
    with fx.faulty_mount(src, {"model.pt": [bad]}) as mnt:
        r = subprocess.run([cli, "probe", str(mnt), "--json"], capture_output=True, text=True,
                           timeout=300)
    assert r.returncode == 1, r.stderr
    (ck,) = json.loads(r.stdout)["checkpoints"]
    assert ck["verdict"] == "damaged" and ck["damaged_tensors"] == [TARGET]
    assert "IO001" in [f["code"] for f in ck["findings"]]


def test_safetensors_without_checksums_still_names_the_unreadable_tensor(fuse_ok, tmp_path):
    """safetensors records no checksums: only the I/O error itself can tell."""
    pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    src = tmp_path / "src"
    src.mkdir()
    from fixtures.checkpoints import exact_tensor

    st.save_file({"a": exact_tensor(256, 256, seed=1), "b": exact_tensor(256, 256, seed=2)},
                 str(src / "m.safetensors"))
    raw = (src / "m.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    b0, b1 = header["b"]["data_offsets"]
    lo = (8 + n + b0 + 8192) // 4096 * 4096
    with fx.faulty_mount(src, {"m.safetensors": [(lo, lo + 4096)]}) as mnt:
        (rep,) = probe_paths([mnt / "m.safetensors"])
    assert rep.verdict == "damaged" and rep.damaged_tensors == ["b"]
    assert [f.tensors for f in rep.findings if f.code == "IO001"] == [("b",)]


def test_unreadable_ranges_are_merged_and_sorted():
    from ckptrescue.checkpoints.formats.tolerant_read import merge_ranges

    assert merge_ranges([(8200, 8208), (8192, 12288), (8192, 8300), (0, 10)]) == [
        (0, 10), (8192, 12288)]
    assert merge_ranges([(0, 4096), (4096, 8192)]) == [(0, 8192)]
    assert merge_ranges([]) == []
