"""Hashing with a reader thread ahead of the hasher gives sha256sum's digest, keeps the first
bytes for format detection, stops its thread, and still names the first unreadable block; a
read plan that switches between reading ahead and reading directly mid-file gives the same, and
keeps the way its timed trials found faster.

File bytes come from numpy's seeded integer generator; the reference digest is ``sha256sum``
(GNU coreutils) where installed, else hashlib over the whole file read at once.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from ckptrescue.datasets import hashing
from ckptrescue.datasets.manifest import build_manifest


def _file(path: Path, size: int, seed: int) -> Path:
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
                     .tobytes())
    return path


def _reference(path: Path) -> str:
    if shutil.which("sha256sum"):
        return subprocess.run(["sha256sum", str(path)], check=True, capture_output=True,
                              text=True).stdout.split()[0]
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("size", [0, 1, hashing.PREFETCH_MIN - 1, hashing.PREFETCH_MIN,
                                  hashing.PREFETCH_MIN + hashing.CHUNK * 3 + 17])
def test_read_ahead_gives_the_same_digest_head_and_size(tmp_path, size):
    path = _file(tmp_path / "f.bin", size, size)
    seen: list[int] = []
    before = {t.name for t in threading.enumerate()}
    out = hashing.hash_file(str(path), prefetch=True, on_bytes=seen.append)
    assert out.sha256 == _reference(path) and out.size == size == sum(seen)
    assert out.head == path.read_bytes()[:hashing.HEAD_BYTES]
    assert hashing.hash_file(str(path)) == out  # the direct read agrees
    assert {t.name for t in threading.enumerate()} == before  # the reader thread is gone


def test_a_read_plan_times_both_ways_alternately_then_keeps_the_faster():
    trial = hashing.TRIAL_BYTES
    for faster_ahead in (True, False):
        plan = hashing.ReadPlan()
        asked = []
        while plan.ahead is None:
            ahead, limit = plan.next_stretch()
            assert limit == trial
            asked.append(ahead)
            plan.timed(ahead, trial, 1.0 if ahead == faster_ahead else 1.5)
        assert asked == [False, True] * hashing.TRIALS
        assert plan.ahead is faster_ahead
        assert plan.next_stretch() == (faster_ahead, None)  # settled: the rest read that way
        plan.timed(not faster_ahead, trial, 0.001)  # a late trial changes nothing
        assert plan.ahead is faster_ahead


def test_a_stretch_cut_short_by_its_file_is_timed_again():
    plan = hashing.ReadPlan()
    ahead, _ = plan.next_stretch()
    plan.timed(ahead, hashing.TRIAL_BYTES // 4, 0.01)  # a small file's worth: too noisy
    assert plan.next_stretch()[0] is ahead
    # the best time of each way decides, so one slow trial (a passing load) does not
    plan = hashing.ReadPlan()
    for seconds in (1.0, 2.0, 5.0, 1.9):  # direct, ahead, direct, ahead
        plan.timed(plan.next_stretch()[0], hashing.TRIAL_BYTES, seconds)
    assert plan.ahead is False


@pytest.mark.parametrize("size", [hashing.PREFETCH_MIN, 7 * hashing.CHUNK, 7 * hashing.CHUNK + 5,
                                  9 * hashing.CHUNK + 4097])
def test_a_planned_read_switching_ways_mid_file_gives_the_same_digest(tmp_path, monkeypatch,
                                                                     size):
    # stretches of 1 MiB + 3 bytes: every switch falls inside a read buffer, not on its edge
    monkeypatch.setattr(hashing, "TRIAL_BYTES", hashing.CHUNK + 3)
    path = _file(tmp_path / "f.bin", size, size % 1000)
    plan = hashing.ReadPlan()
    before = {t.name for t in threading.enumerate()}
    seen: list[int] = []
    out = hashing.hash_file(str(path), prefetch=plan, on_bytes=seen.append)
    assert out.sha256 == _reference(path) and out.size == size == sum(seen)
    assert out.head == path.read_bytes()[:hashing.HEAD_BYTES]
    assert {t.name for t in threading.enumerate()} == before
    # enough stretches for every trial: the plan settled on a way, and reads on with it
    assert plan.ahead is not None
    again = hashing.hash_file(str(path), prefetch=plan)
    assert again.sha256 == out.sha256


def _address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def _mapping_of(address: int) -> tuple[int, int, str]:
    """(start, end, permissions) of this process's mapping that holds ``address``."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, perms = line.split()[:2]
        start, end = (int(x, 16) for x in span.split("-"))
        if start <= address < end:
            return start, end, perms
    raise AssertionError(f"no mapping holds {address:#x}")


def test_every_hashing_read_lands_on_a_page_boundary_in_a_buffer_of_its_own_thread():
    """The reads go into page-aligned buffers (the kernel's copy into a buffer 16 bytes past a
    cache line, where a bytearray of a megabyte often starts, ran two to three times slower),
    each hashing thread has its own, and each is private memory (a forked child writing into
    one gets its own copy, as with a bytearray; a shared mapping would hand it the parent's)."""
    page = mmap.PAGESIZE
    mine = hashing._buffer(hashing.CHUNK)
    others: list[memoryview] = []
    thread = threading.Thread(target=lambda: others.append(hashing._buffer(hashing.CHUNK)))
    thread.start()
    thread.join()
    ahead = hashing._buffers(hashing.CHUNK)
    views = [memoryview(v) for v in (mine, others[0], *ahead)]
    for view in views:
        assert len(view) == hashing.CHUNK and not view.readonly
        address = _address(view)
        assert address % page == 0
        start, end, perms = _mapping_of(address)
        assert perms.startswith("rw") and perms[3] == "p" and end - address >= hashing.CHUNK
    assert hashing._buffer(hashing.CHUNK) is mine  # reused from file to file
    assert len({_address(v) for v in views}) == len(views)


def test_manifest_build_with_a_spare_core_matches_sha256sum(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    names = [f"f{i}.bin" for i in range(3)]
    for i, name in enumerate(names):
        _file(root / name, hashing.PREFETCH_MIN + i * 100_003, 100 + i)
    out = tmp_path / "m.sha256"
    build_manifest(root, out, jobs=1)  # jobs < cores on any multi-core machine: read-ahead
    want = "".join(f"{_reference(root / n)}  {n}\n" for n in names)
    assert out.read_text() == want


@pytest.mark.privileged
@pytest.mark.needs_tool("mkfs.btrfs", "mount", "umount")
def test_read_ahead_names_the_first_unreadable_block(btrfs_with_bad_block, monkeypatch):
    src, _image, mount = btrfs_with_bad_block
    size = hashing.PREFETCH_MIN + 2 * hashing.CHUNK
    _file(src / "big.bin", size, 7)
    bad = hashing.PREFETCH_MIN + 12_288  # a block in the fifth MiB: after four good reads
    mnt = mount(("big.bin", bad))
    # a plan's trial stretches of 2 MiB + 3 meet the bad block in the third (read directly),
    # of 3 MiB + 3 in the second (read ahead)
    for prefetch, trial in ((True, 0), (False, 0), (hashing.ReadPlan(), 2 * hashing.CHUNK + 3),
                            (hashing.ReadPlan(), 3 * hashing.CHUNK + 3)):
        if trial:
            monkeypatch.setattr(hashing, "TRIAL_BYTES", trial)
        out = hashing.hash_file(str(mnt / "big.bin"), prefetch=prefetch)
        assert out.unreadable and out.sha256 is None
        assert out.error_offset == bad - bad % 4096
        assert out.size == out.error_offset  # every byte before the bad block was hashed


_NO_MEMORY = r"""
import resource, sys
from ckptrescue.datasets import hashing
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
try:
    out = hashing.hash_file(sys.argv[1], chunk=2 << 30)
except MemoryError:
    print("MemoryError")
else:
    print("returned", out.error)
"""


def test_no_memory_for_the_read_buffer_is_never_the_file_s_read_error(tmp_path):
    """A buffer this process cannot map is its own failure (MemoryError, as a bytearray's
    was), never reported as the file being unreadable."""
    import sys

    path = _file(tmp_path / "f.bin", 1000, 3)
    done = subprocess.run([sys.executable, "-c", _NO_MEMORY, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "MemoryError", done.stdout + done.stderr
