"""`image` end to end with real ddrescue over read-only loop devices.

Sources are sparse XFS images in /dev/shm (tmpfs); destinations are tmp_path on the local disk,
so the same-media check passes. Bad sectors are simulated with ddrescue's test mode (-H).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ckptrescue.errors import RefusedError, ToolFailedError
from ckptrescue.storage.imaging import image
from ckptrescue.storage.parsers import ddrescue_mapfile
from fixtures import storage as fx
from fixtures.det import det_bytes

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("ddrescue", "mkfs.xfs")]


@pytest.fixture
def xfs_src(shm_dir):
    img = fx.make_fs(shm_dir / "src.img", "xfs")
    fx.put_files(img, "xfs", {"data/blob.bin": det_bytes(3 << 20, 1)})
    return img


def test_image_reports_exactly_the_simulated_bad_ranges(case, xfs_src, tmp_path, no_leftovers):
    before = fx.sha256(xfs_src)
    size = xfs_src.stat().st_size
    bad = [(0x118000, 0x11A000), (0x518600, 0x518800), (0x6000000, 0x6001000)]
    test_map = tmp_path / "test.map"
    test_map.write_text(ddrescue_mapfile.build_test_map(size, bad))
    with fx.loop(xfs_src) as dev:
        res = image(dev, case=case, dest=tmp_path / "out", retries=1, simulate_bad_map=test_map)
    assert res.bad_ranges == bad
    assert res.size == size
    assert res.rescued_bytes == size - sum(e - s for s, e in bad)
    assert res.source_sha256 is None  # not fully readable
    assert not res.finished
    assert fx.sha256(xfs_src) == before
    # the image equals the source on every + range and holds zeros on the bad ranges
    with open(xfs_src, "rb") as a, open(res.image, "rb") as b:
        for s, e in bad:
            b.seek(s)
            assert b.read(e - s) == bytes(e - s)
        a.seek(0x200000)
        b.seek(0x200000)
        assert a.read(1 << 20) == b.read(1 << 20)
    assert fx.sha256(res.image) == res.image_sha256
    # hash over the rescued ranges only == the same hash over the source's readable bytes
    import hashlib

    h = hashlib.sha256()
    with open(xfs_src, "rb") as a:
        pos = 0
        for s, e in [*bad, (size, size)]:
            a.seek(pos)
            h.update(a.read(s - pos))
            pos = e
    assert res.rescued_sha256 == h.hexdigest()
    assert set(res.to_json()) == {"image", "mapfile", "image_sha256", "size", "rescued_bytes",
                                  "bad_ranges"}
    codes = [f.code for f in case.findings()]
    assert "IM001" in codes
    inv = {e.source: e for e in case.evidence()}
    assert inv[res.image].sha256 == res.image_sha256
    assert inv[res.image].details["mapfile_sha256"] == res.mapfile_sha256
    assert case.verify().ok


def test_clean_source_is_hashed_and_matches(case, xfs_src, tmp_path, no_leftovers):
    with fx.loop(xfs_src) as dev:
        res = image(dev, case=case, dest=tmp_path / "out")
    assert res.bad_ranges == []
    assert res.finished
    assert res.source_sha256 == res.image_sha256 == fx.sha256(xfs_src)


def test_same_disk_destination_is_refused(case, tmp_path, no_leftovers):
    src = tmp_path / "on-disk.img"
    with open(src, "wb") as fh:
        fh.truncate(4 << 20)
    with fx.loop(src) as dev, pytest.raises(RefusedError, match="same physical disk"):
        image(dev, case=case, dest=tmp_path / "out")
    assert not (tmp_path / "out" / f"{Path(dev).name}.img").exists()


def test_destination_without_room_is_refused(case, tmp_path, no_leftovers):
    src = tmp_path / "src.img"
    with open(src, "wb") as fh:
        fh.truncate(8 << 20)
    with fx.small_tmpfs("1m") as tiny, fx.loop(src) as dev, \
            pytest.raises(RefusedError, match="bytes free"):
        image(dev, case=case, dest=tiny)


def test_interrupted_image_resumes_to_the_same_hash(case, xfs_src, tmp_path, no_leftovers):
    with fx.loop(xfs_src) as dev:
        cancel = threading.Event()
        timer = threading.Timer(1.5, cancel.set)
        timer.start()
        try:
            with pytest.raises(ToolFailedError, match="interrupted"):
                image(dev, case=case, dest=tmp_path / "out", cancel=cancel,
                      max_read_rate=32 << 20)
        finally:
            timer.cancel()
        partial = ddrescue_mapfile.parse((tmp_path / "out" / f"{Path(dev).name}.map").read_text())
        assert not partial.finished
        res = image(dev, case=case, dest=tmp_path / "out")
    assert res.resumed
    assert res.finished
    assert res.image_sha256 == fx.sha256(xfs_src)


def test_a_mapfile_from_another_rescue_is_refused(case, shm_dir, tmp_path, no_leftovers):
    a, b = shm_dir / "a.img", shm_dir / "b.img"
    for p in (a, b):
        with open(p, "wb") as fh:
            fh.truncate(4 << 20)
    with fx.loop(a) as dev:
        image(dev, case=case, dest=tmp_path / "out", name="disk")
    with fx.loop(b) as dev, pytest.raises(RefusedError, match="belongs to another rescue"):
        image(dev, case=case, dest=tmp_path / "out", name="disk")


def test_rerun_after_completion_writes_nothing(case, xfs_src, tmp_path, no_leftovers):
    with fx.loop(xfs_src) as dev:
        first = image(dev, case=case, dest=tmp_path / "out")
        mtime = Path(first.image).stat().st_mtime_ns
        again = image(dev, case=case, dest=tmp_path / "out")
    assert again.image_sha256 == first.image_sha256
    assert Path(first.image).stat().st_mtime_ns == mtime


def test_progress_is_reported_from_the_mapfile(case, xfs_src, tmp_path, no_leftovers):
    seen = []
    with fx.loop(xfs_src) as dev:
        image(dev, case=case, dest=tmp_path / "out", max_read_rate=128 << 20,
              on_progress=lambda **kw: seen.append(kw))
    assert seen, "no progress callback during a multi-second imaging run"
    assert all(0 <= s["done"] <= s["total"] == xfs_src.stat().st_size for s in seen)
    assert {"rescued", "bad", "untried"} <= set(seen[-1]["summary"])


def test_ctrl_c_stops_ddrescue_and_the_rerun_resumes(case, xfs_src, tmp_path, no_leftovers):
    """ddrescue runs in its own session: an interrupt in the kit (here raised from the progress
    callback, as Ctrl-C would be) must stop it, not orphan it."""
    import psutil

    def interrupt(**kw):
        raise KeyboardInterrupt

    out = tmp_path / "out"
    with fx.loop(xfs_src) as dev:
        with pytest.raises(KeyboardInterrupt):
            image(dev, case=case, dest=out, max_read_rate=16 << 20, on_progress=interrupt)
        running = [p.info["cmdline"] for p in psutil.process_iter(["name", "cmdline"])
                   if p.info["name"] == "ddrescue" and str(out) in " ".join(p.info["cmdline"] or [])]
        assert running == []
        res = image(dev, case=case, dest=out)
    assert res.resumed and res.image_sha256 == fx.sha256(xfs_src)


def test_media_that_sysfs_cannot_name_is_unknown_and_refused(case, shm_dir, tmp_path):
    from ckptrescue.storage import samedisk

    cmp = samedisk.compare(tmp_path, "/proc/self")  # procfs: major 0, not RAM, not a disk
    assert cmp.verdict is samedisk.Sameness.UNKNOWN and "proc" in cmp.reason
    assert samedisk.compare(shm_dir, tmp_path).verdict is samedisk.Sameness.DIFFERENT
    assert samedisk.compare(tmp_path, tmp_path / "x" / "y").verdict is samedisk.Sameness.SAME


def test_a_source_mounted_read_write_is_refused(case, shm_dir, tmp_path, no_leftovers):
    img = fx.make_fs(shm_dir / "live.img", "ext4")
    with fx.loop(img, read_only=False) as dev:
        mnt = tmp_path / "live"
        mnt.mkdir()
        fx.sh("mount", "-t", "ext4", dev, str(mnt))
        try:
            with pytest.raises(RefusedError, match="mounted read-write"):
                image(dev, case=case, dest=tmp_path / "out")
        finally:
            fx.sh("umount", str(mnt))
