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


def _ours(text: str) -> set[str]:
    """Lines naming this suite's files (other sessions may use loop devices concurrently)."""
    return {ln for ln in text.splitlines() if "ckr-" in ln or "pytest-of-" in ln}


@pytest.fixture
def no_leftovers():
    """Fail if a test leaves loop devices over its files, or mounts of its directories."""
    before = _ours(fx.sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout)
    mounts_before = _ours(Path("/proc/mounts").read_text())
    yield
    leaked = _ours(fx.sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout) - before
    assert not leaked, f"loop devices left attached: {leaked}"
    left = _ours(Path("/proc/mounts").read_text()) - mounts_before
    assert not left, f"mounts left behind: {left}"
