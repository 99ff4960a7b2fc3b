"""`extract` writes only beneath its destination: a symlinked directory planted inside it is
refused, never followed; the image hashes the same before and after."""

from __future__ import annotations

import os

import pytest

from ckptrescue.errors import RefusedError
from ckptrescue.storage.extract import extract
from ckptrescue.storage.mounting import mounted
from fixtures import storage as fx

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("mkfs.ext4")]


def test_extract_refuses_a_symlinked_directory_inside_the_destination(case, shm_dir, tmp_path,
                                                                       no_leftovers) -> None:
    pytest.importorskip("torch")
    good = fx.torch_checkpoint(tmp_path / "good.pt", seed=1)
    img = fx.make_fs(shm_dir / "x.img", "ext4", size=64 << 20)
    fx.put_files(img, "ext4", {"run/step-100/model.pt": good.read_bytes()})
    before = fx.sha256(img)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "recovered"
    dest.mkdir()
    (dest / "run").symlink_to(elsewhere)
    with mounted(img, tmp_path / "mnt", case=case) as m, \
            pytest.raises(RefusedError, match="symlink"):
        extract(m.mountpoint, dest, case=case)
    assert os.listdir(elsewhere) == []
    assert fx.sha256(img) == before
