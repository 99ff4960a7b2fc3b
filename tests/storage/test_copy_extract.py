"""`copy` and `extract` from a read-only mount made by the kit, on real images."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from ckptrescue.errors import RefusedError
from ckptrescue.storage.copy import copy_tree
from ckptrescue.storage.extract import extract
from ckptrescue.storage.mounting import mounted
from fixtures import storage as fx
from fixtures.det import det_bytes

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("rsync", "mkfs.ext4")]


@pytest.fixture
def ext4_with_files(shm_dir):
    img = fx.make_fs(shm_dir / "e.img", "ext4")
    with fx.rw_mounted(img, "ext4") as mnt:
        (mnt / "data").mkdir()
        (mnt / "data" / "a.bin").write_bytes(det_bytes(300_000, 1))
        os.link(mnt / "data" / "a.bin", mnt / "data" / "a-hardlink.bin")
        os.setxattr(mnt / "data" / "a.bin", "user.origin", b"run-7")
        with open(mnt / "data" / "sparse.bin", "wb") as fh:
            fh.seek(5 << 20)
            fh.write(b"end")
    return img


def test_copy_is_complete_verified_and_leaves_the_image_unchanged(case, ext4_with_files,
                                                                   tmp_path, no_leftovers):
    before = fx.sha256(ext4_with_files)
    with mounted(ext4_with_files, tmp_path / "mnt", case=case) as m:
        res = copy_tree(m.mountpoint, case=case, dest=tmp_path / "copy")
    assert res.verified and res.differences == []
    assert res.files == 3
    dst = tmp_path / "copy" / "data"
    assert os.stat(dst / "a.bin").st_ino == os.stat(dst / "a-hardlink.bin").st_ino  # -H
    assert os.getxattr(dst / "a.bin", "user.origin") == b"run-7"  # -X
    assert os.stat(dst / "sparse.bin").st_blocks * 512 < 1 << 20  # -S
    assert {f.code for f in res.findings} == {"CP003"}
    manifest = case.read_artifact(res.manifest_sha256).decode()
    assert f"{fx.sha256(dst / 'a.bin')}  ./data/a.bin" in manifest
    assert fx.sha256(ext4_with_files) == before


def test_copy_to_the_same_disk_is_refused(case, tmp_path, no_leftovers):
    img = fx.make_fs(tmp_path / "on-disk.img", "ext4")
    with mounted(img, tmp_path / "mnt", case=case) as m, \
            pytest.raises(RefusedError, match="other media"):
        copy_tree(m.mountpoint, case=case, dest=tmp_path / "copy")


def test_extract_copies_only_intact_checkpoints_with_companions(case, shm_dir, tmp_path,
                                                                 no_leftovers):
    pytest.importorskip("torch")
    good = fx.torch_checkpoint(tmp_path / "good.pt", seed=1)
    bad = fx.torch_checkpoint(tmp_path / "bad.pt", seed=2)
    # flip bytes inside the largest storage record: its CRC-32 no longer matches
    off, size = max((v for k, v in fx.zip_member_data_offsets(bad).items() if "/data/" in k),
                    key=lambda v: v[1])
    with open(bad, "r+b") as fh:
        fh.seek(off + size // 2)
        fh.write(b"\xff\xff\xff\xff")
    with zipfile.ZipFile(good) as zf:
        assert zf.testzip() is None
    img = fx.make_fs(shm_dir / "x.img", "ext4", size=64 << 20)
    fx.put_files(img, "ext4", {
        "run/step-100/model.pt": good, "run/step-100/config.json": b'{"hidden": 512}',
        "run/step-100/tokenizer.json": b"{}", "run/step-200/model.pt": bad,
        "run/step-200/config.json": b'{"hidden": 512}', "run/notes.txt": b"not a checkpoint"})
    before = fx.sha256(img)
    with mounted(img, tmp_path / "mnt", case=case) as m:
        res = extract(m.mountpoint, tmp_path / "recovered", case=case)
    out = tmp_path / "recovered" / "run"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "step-100/config.json", "step-100/model.pt", "step-100/tokenizer.json"]
    assert fx.sha256(out / "step-100" / "model.pt") == fx.sha256(good)
    assert [lb["checkpoint"] for lb in res.left_behind] == ["run/step-200/model.pt"]
    assert res.left_behind[0]["verdict"] != "intact"
    assert {f.code for f in res.findings} == {"EX001", "EX002"}
    assert fx.sha256(img) == before
    assert not Path(tmp_path / "recovered" / "run" / "notes.txt").exists()
