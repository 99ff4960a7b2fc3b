"""manifest update: only new and changed files are hashed, the result equals a full rebuild,
deleted entries are dropped, and an interrupted update leaves the old manifest as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.datasets import manifest as manifest_mod
from ckptrescue.datasets import manifest_update
from ckptrescue.datasets.manifest import build_manifest, sidecar_path
from ckptrescue.datasets.manifest_update import prev_path, update_manifest
from ckptrescue.errors import UsageError
from fixtures.det import det_bytes


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "ds"
    for i in range(30):
        d = root / f"d{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:03d}.bin").write_bytes(det_bytes(100 + i, 1, i))
    manifest = tmp_path / "out" / "ds.sha256"
    build_manifest(root, manifest, jobs=2)
    return root, manifest


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every path hashed by the builder's hash function in this process."""
    seen: list[bytes] = []
    real = manifest_mod.hash_file

    def counting(path, *a, **kw):
        seen.append(os.fsencode(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(manifest_mod, "hash_file", counting)
    return seen


def _change(root: Path) -> None:
    (root / "d0" / "f000.bin").write_bytes(b"different content, different size")  # changed size
    same = root / "d1" / "f001.bin"  # same size, new mtime
    same.write_bytes(bytes(len(same.read_bytes())))
    st = same.stat()
    os.utime(same, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    replaced = root / "d2" / "f002.bin"  # same size and mtime, new inode (a rename over it)
    st = replaced.stat()
    tmp = root / "d2" / "tmp"
    tmp.write_bytes(b"x" * st.st_size)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    tmp.replace(replaced)
    (root / "d0" / "f003.bin").unlink()
    (root / "d0" / "new.bin").write_bytes(b"new file")


def test_only_changed_files_are_hashed_and_result_equals_rebuild(built, counted, tmp_path):
    root, manifest = built
    old_manifest, old_side = manifest.read_bytes(), sidecar_path(manifest).read_bytes()
    _change(root)
    counted.clear()
    result = update_manifest(root, manifest, jobs=2)
    hashed = sorted(Path(os.fsdecode(p)).relative_to(root).as_posix() for p in counted)
    assert hashed == ["d0/f000.bin", "d0/new.bin", "d1/f001.bin", "d2/f002.bin"]
    assert (result.hashed, result.reused, result.files) == (4, 26, 30)
    assert [r.decode() for r in result.new] == ["d0/new.bin"]
    assert sorted(r.decode() for r in result.changed) == ["d0/f000.bin", "d1/f001.bin",
                                                         "d2/f002.bin"]
    assert [r.decode() for r in result.deleted] == ["d0/f003.bin"]
    assert result.ok
    rebuilt = tmp_path / "full" / "ds.sha256"
    build_manifest(root, rebuilt, jobs=2)
    assert manifest.read_bytes() == rebuilt.read_bytes()
    assert sidecar_path(manifest).read_bytes() == sidecar_path(rebuilt).read_bytes()
    assert b"d0/f003.bin" not in manifest.read_bytes()
    # the old pair is kept
    assert prev_path(manifest).read_bytes() == old_manifest
    assert sidecar_path(prev_path(manifest)).read_bytes() == old_side
    assert not list(manifest.parent.glob("*.tmp"))
    # nothing changed since: nothing hashed
    counted.clear()
    again = update_manifest(root, manifest, jobs=1)
    assert counted == [] and (again.hashed, again.reused) == (0, 30)
    assert manifest.read_bytes() == rebuilt.read_bytes()


def test_sidecar_without_inodes_falls_back_to_size_and_mtime(built, counted) -> None:
    root, manifest = built
    side = sidecar_path(manifest)
    rows = [json.loads(line) for line in side.read_text().splitlines()]
    for row in rows:
        row.pop("inode")
    side.write_text("".join(json.dumps(r) + "\n" for r in rows))
    counted.clear()
    result = update_manifest(root, manifest)
    assert counted == [] and not result.inode_checked
    assert all("inode" in json.loads(line) for line in side.read_text().splitlines())


@pytest.mark.parametrize("where", ["hashing", "rename"])
def test_interrupted_update_leaves_old_manifest(built, monkeypatch, where) -> None:
    root, manifest = built
    before = {p.name: p.read_bytes() for p in manifest.parent.iterdir()}
    _change(root)
    if where == "hashing":
        def boom(*a, **kw):
            raise KeyboardInterrupt

        monkeypatch.setattr(manifest_mod, "hash_file", boom)
    else:
        real = os.replace

        def replace(src, dst):
            if Path(dst) == manifest:
                raise KeyboardInterrupt
            return real(src, dst)

        monkeypatch.setattr(manifest_update.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        update_manifest(root, manifest, jobs=1)
    assert manifest.read_bytes() == before[manifest.name]
    assert not list(manifest.parent.glob("*.tmp"))
    if where == "hashing":
        assert {p.name: p.read_bytes() for p in manifest.parent.iterdir()} == before


def test_refuses_without_sidecar_or_inside_dir(built) -> None:
    root, manifest = built
    sidecar_path(manifest).unlink()
    with pytest.raises(UsageError):
        update_manifest(root, manifest)
    with pytest.raises(UsageError):
        update_manifest(root, root / "m.sha256")


def test_cli(built) -> None:
    root, manifest = built
    (root / "d1" / "f004.bin").unlink()
    (root / "d1" / "added.bin").write_bytes(b"a")
    proc = invoke("manifest", "update", str(root), str(manifest), "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["hashed"], data["reused"], data["files"]) == (1, 29, 30)
    assert data["deleted"] == ["d1/f004.bin"] and data["new"] == ["d1/added.bin"]
    proc = invoke("manifest", "update", str(root), str(manifest), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "hashed 0 (0 new, 0 changed), reused 30" in proc.stdout


def test_a_second_writer_of_one_manifest_is_refused_before_it_hashes(
        built: tuple[Path, Path], tmp_path: Path, counted: list[bytes]) -> None:
    # a build (or another update) of the same manifest holds its lock: an update that ran on
    # beside it could rename its sidecar between the other's sidecar and manifest
    from ckptrescue.datasets.build_store import BuildStore, store_path

    root, manifest = built
    (root / "new.bin").write_bytes(b"new")
    before = manifest.read_bytes(), sidecar_path(manifest).read_bytes()
    held = BuildStore.create(manifest, root)
    try:
        with pytest.raises(UsageError, match="another manifest build or update is writing it"):
            update_manifest(root, manifest)
        res = invoke("manifest", "update", str(root), str(manifest))
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.startswith(f"ckptrescue: error: {manifest}: another manifest build "
                                     "or update is writing it now")
    finally:
        held.remove()
    assert counted == []  # nothing hashed
    assert (manifest.read_bytes(), sidecar_path(manifest).read_bytes()) == before
    assert not prev_path(manifest).exists()
    # and while an update runs, a build of the same manifest is refused
    from ckptrescue.datasets.build_store import writing

    with writing(manifest), pytest.raises(UsageError, match="another manifest build or update"):
        build_manifest(root, manifest, jobs=1)
    assert not store_path(manifest).exists()
    result = update_manifest(root, manifest)
    assert result.new == [b"new.bin"]


def test_a_filesystem_without_file_locks(built: tuple[Path, Path],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # NFS without its lock daemon: flock fails with ENOLCK, which is not "busy"
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    root, manifest = built
    (root / "new.bin").write_bytes(b"new")
    assert update_manifest(root, manifest).new == [b"new.bin"]  # runs unlocked, as before
    with pytest.raises(UsageError) as caught:
        build_manifest(root, manifest, jobs=1)
    assert caught.value.message == f"{manifest}: cannot be locked here (No locks available)"
