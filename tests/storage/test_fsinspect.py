"""`fs inspect` on real images: dirty XFS log and ext4 needs_recovery become findings; the
images are unchanged."""

from __future__ import annotations

import pytest

from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from ckptrescue.storage.fsinspect import fs_inspect
from fixtures import storage as fx

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("mkfs.xfs", "xfs_db", "dumpe2fs")]


def test_dirty_xfs_log_is_a_finding(case, shm_dir, no_leftovers):
    img = fx.make_fs(shm_dir / "x.img", "xfs")
    fx.make_dirty(img, "xfs")
    before = fx.sha256(img)
    res = fs_inspect(img, case=case)
    record(case, from_library(res))  # the engine's one writer records it
    codes = {f.code for f in res.findings}
    assert res.fstype == "xfs"
    assert "XF001" in codes and "XF007" not in codes
    assert res.facts["log"]["state"] == "DIRTY"
    copy = res.facts["log_copy"]  # the log was preserved as an artifact first
    assert copy["returncode"] == 0 and copy["size"] > 0
    assert case.artifact_path(copy["sha256"]).stat().st_size == copy["size"]
    assert "XF002" not in codes
    assert fx.sha256(img) == before
    assert "XF001" in {f.code for f in case.findings()}


def test_clean_xfs_has_no_log_finding(case, shm_dir, no_leftovers):
    img = fx.make_fs(shm_dir / "x.img", "xfs")
    res = fs_inspect(img, case=case)
    codes = {f.code for f in res.findings}
    assert codes == {"XF007"}
    assert res.facts["xfs_repair_n"]["returncode"] == 0


def test_ext4_needs_recovery_is_a_finding(case, shm_dir, no_leftovers):
    img = fx.make_fs(shm_dir / "e.img", "ext4")
    fx.make_dirty(img, "ext4")
    before = fx.sha256(img)
    res = fs_inspect(img, case=case)
    assert res.fstype == "ext4"
    assert "E4001" in {f.code for f in res.findings}
    assert fx.sha256(img) == before
    clean = fx.make_fs(shm_dir / "c.img", "ext4")
    assert {f.code for f in fs_inspect(clean, case=case).findings} == {"E4004"}


def test_ext4_recorded_errors_are_findings(case, shm_dir, no_leftovers):
    img = fx.make_fs(shm_dir / "err.img", "ext4")
    fx.record_ext4_errors(img)
    res = fs_inspect(img, case=case)
    codes = {f.code for f in res.findings}
    assert {"E4002", "E4003"} <= codes
    e4003 = next(f for f in res.findings if f.code == "E4003")
    assert e4003.details["First error function"] == "ext4_lookup"
    assert res.facts["dumpe2fs"]["error_count"] == 3


def test_a_mounted_filesystem_reports_its_live_sysfs_state(case, shm_dir, tmp_path,
                                                           no_leftovers):
    from ckptrescue.storage.mounting import mounted

    img = fx.make_fs(shm_dir / "m.img", "ext4")
    with mounted(img, tmp_path / "mnt", case=case) as m:
        res = fs_inspect(m.loop_device, case=case, health=False)
    live = res.facts["mounted"]
    assert live["ext4"]["errors_count"] == "0"
    assert live["mounts"][0]["mountpoint"] == str(tmp_path / "mnt")
    assert "E4003" not in {f.code for f in res.findings}
