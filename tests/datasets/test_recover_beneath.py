"""`recover` writes only beneath --to: a symlinked directory inside it and '..' in manifest
names are refused per file, never followed, and nothing lands outside."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ckptrescue.datasets.manifest import build_manifest
from ckptrescue.datasets.recover import recover
from fixtures.datasets import flip_byte, tree_digest


def test_recover_refuses_a_symlinked_directory_inside_to(dataset, tmp_path: Path) -> None:
    root, files = dataset
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest)
    snaps = tmp_path / "snapshots"
    shutil.copytree(root, snaps / "2024-02-01")
    flip_byte(files["npy"], 4000)
    rel = files["npy"].relative_to(root)
    before = tree_digest(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    to = tmp_path / "to"
    to.mkdir()
    (to / rel.parts[0]).symlink_to(elsewhere)
    result = recover(root, manifest=manifest, source=snaps, to=to)
    row = next(r for r in result.files if r.rel == os.fsencode(rel))
    assert not row.recovered and "symlink" in row.reason
    assert os.listdir(elsewhere) == []
    assert tree_digest(root) == before
    # with the planted link gone, the same file is recovered, verified
    (to / rel.parts[0]).unlink()
    again = recover(root, manifest=manifest, source=snaps, to=to)
    assert again.ok
    assert hashlib.sha256((to / rel).read_bytes()).hexdigest() == \
        hashlib.sha256((snaps / "2024-02-01" / rel).read_bytes()).hexdigest()
