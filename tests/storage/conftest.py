"""Fixtures for block-storage tests: sparse images in tmpfs (/dev/shm), so that the imaging
destination (tmp_path, on the local disk) is on other physical media than the source."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures import storage as fx  # noqa: E402


@pytest.fixture
def shm_dir():
    """A scratch directory on tmpfs (RAM), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ckr-test-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def no_leftovers(tmp_path):
    """Fail if a test leaves loop devices over its files, or mounts of its directories.

    Only this test's paths count (its tmp_path, and the ``ckr-`` scratch dirs of
    fixtures/storage.py): other sessions on the machine use loop devices concurrently."""
    marks = (str(tmp_path), "/ckr-")

    def ours(text: str) -> set[str]:
        return {ln for ln in text.splitlines() if any(m in ln for m in marks)}

    before = ours(fx.sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout)
    mounts_before = ours(Path("/proc/mounts").read_text())
    yield
    leaked = ours(fx.sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout) - before
    assert not leaked, f"loop devices left attached: {leaked}"
    left = ours(Path("/proc/mounts").read_text()) - mounts_before
    assert not left, f"mounts left behind: {left}"
