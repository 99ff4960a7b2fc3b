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
def no_leftovers():
    """Fail if a test leaves loop devices over its files or mounts under /dev/shm or the case."""
    before = fx.sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout
    yield
    after = fx.sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout
    leaked = set(after.splitlines()) - set(before.splitlines())
    assert not leaked, f"loop devices left attached: {leaked}"
