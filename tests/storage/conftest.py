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


def release_immutable(*roots: Path) -> None:
    """Give back what the kit made immutable under ``roots``: through ``writeblock release``
    of each case found there (audited), then, for anything left (a sealed case, a case
    elsewhere), by clearing the flag directly so that the directories can be removed."""
    from ckptrescue.record.case import Case
    from ckptrescue.storage import writeblock

    for root in roots:
        if not root.is_dir():
            continue
        for audit in root.rglob("audit.jsonl"):
            try:
                case = Case.open(audit.parent)
                if case.sealed:
                    continue
                for row in writeblock.status(case):
                    if row["guarantee"] == writeblock.IMAGE and row["blocked"]:
                        writeblock.release(row["target"], case)
            except Exception:  # noqa: BLE001, S112 - cleanup must go on
                continue
        writeblock.clear_immutable_tree(root)


@pytest.fixture(autouse=True)
def _immutable_images_released(tmp_path):
    """Images the kit acquired are made immutable (chattr +i): clear that after each test, or
    tmp_path could never be removed."""
    yield
    release_immutable(tmp_path)


@pytest.fixture
def shm_dir(request):
    """A scratch directory on tmpfs (RAM), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ckr-test-", dir="/dev/shm"))
    request.node.ckr_shm_dir = str(path)  # for no_leftovers: this test's own scratch
    try:
        yield path
    finally:
        release_immutable(path)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def no_leftovers(tmp_path, request):
    """Fail if a test leaves loop devices over its files, or mounts of its directories.

    Only this test's paths count (its tmp_path and its own ``shm_dir``): other sessions on the
    machine use loop devices (and ``/dev/shm/ckr-test-*`` dirs) concurrently."""

    def ours(text: str) -> set[str]:
        marks = [str(tmp_path) + "/"]
        if getattr(request.node, "ckr_shm_dir", None):
            marks.append(request.node.ckr_shm_dir + "/")
        return {ln for ln in text.splitlines() if any(m in ln for m in marks)}

    before = ours(fx.sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout)
    mounts_before = ours(Path("/proc/mounts").read_text())
    yield
    leaked = ours(fx.sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout) - before
    assert not leaked, f"loop devices left attached: {leaked}"
    left = ours(Path("/proc/mounts").read_text()) - mounts_before
    assert not left, f"mounts left behind: {left}"
