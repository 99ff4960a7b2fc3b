"""Fixtures for the dataset tests: a TFRecord written by TensorFlow once per session (in a child
interpreter), fresh mixed-format dataset folders, and a btrfs image whose one data block fails
its checksum, mounted read-only so reads of that block return a real EIO."""

from __future__ import annotations

import hashlib
import mmap
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fixtures import datasets as fx  # noqa: E402
from fixtures.storage import detach_own  # noqa: E402


@pytest.fixture(scope="session")
def tf_tfrecord(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TFRecord file written by tensorflow-cpu's tf.io.TFRecordWriter (once per session)."""
    path = tmp_path_factory.mktemp("tf") / "written-by-tf.tfrecord"
    fx.write_tfrecord_with_tensorflow(path)
    return path


@pytest.fixture
def dataset(tmp_path: Path, tf_tfrecord: Path) -> tuple[Path, dict[str, Path]]:
    root = tmp_path / "ds"
    return root, fx.make_dataset(root, tf_tfrecord)


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120).stdout


def file_offset_in_image(image: Path, marker: bytes) -> int:
    with image.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        first = m.find(marker)
        assert first >= 0, "marker not found in image"
        assert m.find(marker, first + 1) < 0, "marker found twice in image"
        return first


@pytest.fixture
def btrfs_with_bad_block(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """Yields (source_dir, image, make_mount) helper: fill source_dir, then call ``mount()``.

    Usage: ``src, image, mount = fixture``; ``mnt = mount((victim_rel, bad_offset), ...)`` builds
    the image from ``src`` with ``mkfs.btrfs --rootdir`` (no read-write mount ever), flips one byte
    in the data block of each victim that holds its ``bad_offset`` (found by searching the image
    for that block's bytes), attaches the image read-only and mounts it ``ro``. Unmounted and
    detached in ``finally``; the image is checked unchanged.
    """
    src = tmp_path / "btrfs-src"
    src.mkdir()
    image = tmp_path / "dataset.btrfs.img"
    state: dict[str, str] = {}

    def mount(*victims: tuple[str, int]) -> Path:
        with image.open("wb") as fh:
            fh.truncate(160 << 20)
        _run("mkfs.btrfs", "-q", "--rootdir", str(src), str(image))
        for victim_rel, bad_offset in victims:
            data = (src / victim_rel).read_bytes()
            block = bad_offset - bad_offset % 4096
            marker = data[block : block + 4096]  # the whole block: unique in the image
            where = file_offset_in_image(image, marker)  # data extents are 4 KiB aligned
            with image.open("r+b") as fh:
                fh.seek(where + 100)
                b = fh.read(1)
                fh.seek(where + 100)
                fh.write(bytes([b[0] ^ 0xFF]))
        state["image_sha"] = hashlib.sha256(image.read_bytes()).hexdigest()
        loop = _run("losetup", "--read-only", "--find", "--show", str(image)).strip()
        state["loop"] = loop
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        _run("mount", "-t", "btrfs", "-o", "ro", loop, str(mnt))
        state["mnt"] = str(mnt)
        return mnt

    try:
        yield src, image, mount  # type: ignore[misc]
    finally:
        if "mnt" in state:
            subprocess.run(["umount", state["mnt"]], check=False, timeout=60)
        if "loop" in state:
            detach_own(state["loop"], image)
        if "image_sha" in state:
            after = hashlib.sha256(image.read_bytes()).hexdigest()
            assert after == state["image_sha"], "the read-only mounted image changed"
