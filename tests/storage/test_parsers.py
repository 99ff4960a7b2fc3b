"""Pure parsers against real recorded tool outputs (fixtures/transcripts/, see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptrescue.storage import fsinspect
from ckptrescue.storage.parsers import (
    ddrescue_mapfile,
    debugfs,
    dumpe2fs,
    nvme,
    smartctl,
    xfs_db,
    xfs_logprint,
    zpool_status,
)

T = Path(__file__).resolve().parents[2] / "fixtures" / "transcripts"


def read(rel: str) -> str:
    return (T / rel).read_text()


# ---- ddrescue mapfile ---------------------------------------------------------------------------

def test_real_mapfile_totals_match_ddrescuelog():
    mp = ddrescue_mapfile.parse(read("ddrescue/ddrescue-1.27-H-4-bad-areas.map"))
    assert mp.current_status == "+" and mp.current_pass == 1
    assert mp.bad_ranges() == [(0x400, 0x600), (0x118000, 0x11A000), (0x518600, 0x518800),
                               (0x6000000, 0x6001000)]
    # ddrescuelog -t (recorded beside it): bad-sector 13312 B in 4 areas, extent 335544 kB
    log = read("ddrescue/ddrescuelog-t.txt")
    assert "13312 B,  in      4 area(s)" in log
    assert mp.bad == 13312
    assert mp.domain_end == 320 * 1024 * 1024
    assert mp.rescued + mp.bad == mp.domain_end
    assert not mp.finished


def test_two_field_status_line_octal_and_inline_comments():
    text = "# old 1.20 map\n0 ?\n0 01000 + # octal size\n0x200 512 /\n1024 0x200 *\n"
    mp = ddrescue_mapfile.parse(text)
    assert mp.current_pass is None
    assert mp.blocks[0] == ddrescue_mapfile.Block(0, 512, "+")
    assert mp.pending == 1024
    assert mp.unreadable_ranges() == [(512, 1536)]


@pytest.mark.parametrize(("text", "words"), [
    ("", "no status line"),
    ("0 + 1\n0 512 +\n600 10 +\n", "not contiguous"),
    ("0 + 1\n0 512 X\n", "unknown block status"),
    ("0 Q 1\n", "unknown current_status"),
    ("0 + 1\n0 zz +\n", "not a number"),
])
def test_bad_mapfiles_raise_one_line_errors(text, words):
    with pytest.raises(ddrescue_mapfile.MapfileError, match=words):
        ddrescue_mapfile.parse(text, name="x.map")


@given(st.text(max_size=300))
def test_parser_never_crashes_on_arbitrary_text(text):
    try:
        ddrescue_mapfile.parse(text)
    except ddrescue_mapfile.MapfileError:
        pass


def test_build_test_map_round_trips():
    text = ddrescue_mapfile.build_test_map(1 << 20, [(4096, 8192), (0, 512)])
    mp = ddrescue_mapfile.parse(text)
    assert mp.bad_ranges() == [(0, 512), (4096, 8192)]
    assert mp.domain_end == 1 << 20


# ---- XFS / ext4 -----------------------------------------------------------------------------------

def test_xfs_superblock_print():
    sb = xfs_db.parse_print(read("xfs/xfs_db-sb0-print.clean.txt"))
    assert sb["magicnum"] == "0x58465342"
    assert xfs_db.as_int(sb["blocksize"]) == 4096
    assert xfs_db.as_int(sb["features_incompat"]) & fsinspect.XFS_INCOMPAT_NEEDSREPAIR == 0
    assert "(correct)" in sb["crc"]


def test_xfs_logprint_clean_and_dirty():
    clean = xfs_logprint.parse(read("xfs/xfs_logprint-t.clean.txt"))
    dirty = xfs_logprint.parse(read("xfs/xfs_logprint-t.dirty.txt"))
    assert clean is not None and not clean.dirty and clean.head == clean.tail
    assert dirty is not None and dirty.dirty and dirty.head != dirty.tail
    assert clean.daddr == dirty.daddr == 327728


def test_xfs_db_blockuse_and_bmap():
    text = read("xfs/xfs_db-blockuse-bmap.txt")
    assert xfs_db.parse_convert(text) == [25]
    uses = xfs_db.parse_blockuse(text)
    assert [(u.fsblock, u.type, u.inode, u.path) for u in uses] == [
        (25, "data", 132, "d/model.ckpt"), (26, "data", 132, "d/model.ckpt"),
        (20001, "free2", None, None)]
    sections = xfs_db.split_echo_sections(text)
    assert xfs_db.parse_bmap(sections["132"]) == [xfs_db.BmapExtent("data", 0, 24, 2048, 0)]


def test_dumpe2fs_needs_recovery_vs_clean():
    dirty = dumpe2fs.parse(read("e2fs/dumpe2fs-h.needs_recovery.txt"))
    clean = dumpe2fs.parse(read("e2fs/dumpe2fs-h.clean.txt"))
    assert dirty.needs_recovery and not clean.needs_recovery
    assert clean.state == "clean" and clean.error_count == 0
    assert "has_journal" in dirty.features and dirty.to_json()["needs_recovery"] is True


def test_debugfs_outputs():
    owners = debugfs.parse_icheck(read("e2fs/debugfs-icheck.txt"))
    assert owners == {0: None, 1: None, 1550: 12, 2000: 12}
    assert debugfs.parse_ncheck(read("e2fs/debugfs-ncheck.txt")) == {12: ["model.ckpt"]}
    (ext,) = debugfs.parse_extents(read("e2fs/debugfs-ex.txt"))
    assert (ext.logical, ext.physical, ext.length) == (0, 1549, 768)
    assert debugfs.parse_stat_size(read("e2fs/debugfs-stat.txt")) == 3 << 20


# ---- ZFS ----------------------------------------------------------------------------------------

def test_zpool_status_permanent_errors_serverfault():
    (p,) = zpool_status.parse(read("zpool/serverfault-800628-permanent-errors.txt"))
    assert p.pool == "seagate3tb" and p.state == "ONLINE"
    assert [(v.name, v.cksum) for v in p.vdevs] == [("seagate3tb", 28), ("sda", 56)]
    assert p.error_files == ["/mnt/seagate3tb/Install.iso", "/mnt/seagate3tb/some-other-file1.txt",
                             "/mnt/seagate3tb/some-other-file2.txt"]
    codes = sorted(f.code for f in fsinspect.zfs_findings([p], "seagate3tb"))
    assert codes == ["ZF002", "ZF003"]


def test_zpool_status_degraded_with_abbreviated_counts_and_scan_continuation():
    (p,) = zpool_status.parse(read("zpool/file-vdevs-scrub-degraded-2017.txt"))
    assert p.state == "DEGRADED"
    vdev3 = next(v for v in p.vdevs if v.name == "/tmp/tank/vdev3")
    assert vdev3.cksum == 1370 and vdev3.message == "too many errors"
    (q,) = zpool_status.parse(read("zpool/nixos-nvme-degraded-2021.txt"))
    assert "49.18% done" in q.scan
    assert q.vdevs[1].read == 206 and q.vdevs[1].cksum == 96
    assert "zroot/nix:<0x0>" in q.error_files and len(q.error_files) == 7
    codes = sorted(f.code for f in fsinspect.zfs_findings([q], "zroot"))
    assert codes == ["ZF001", "ZF002", "ZF003"]


# ---- SMART / NVMe ---------------------------------------------------------------------------------

def test_smartctl_failing_ata_drive():
    rep = smartctl.parse(read("smartctl/scrutiny-smart-fail2.trimmed.json"))
    assert rep.exit_status == 216
    assert rep.exit_meaning == [smartctl.EXIT_BITS[b] for b in (3, 4, 6, 7)]
    assert rep.passed is False
    assert rep.sector_counts["Reallocated_Sector_Ct"] == 1975
    assert rep.sector_counts["Current_Pending_Sector"] == 8
    codes = sorted(f.code for f in fsinspect.smart_findings(rep, "/dev/sdc"))
    assert codes == ["SM001", "SM002", "SM004", "SM006"]


def test_smartctl_nvme_with_media_errors_and_a_healthy_one():
    bad = smartctl.parse(read("smartctl/scrutiny-smart-nvme-failed.json"))
    codes = sorted(f.code for f in fsinspect.smart_findings(bad, "/dev/nvme0"))
    assert codes == ["NV002", "NV005"]
    h = nvme.parse_health(bad.nvme_health or {})
    assert h.media_errors == 7 and h.error_log_entries == 62 and h.critical_warning == 0
    good = smartctl.parse(read("smartctl/scrutiny-smart-nvme.json"))
    assert fsinspect.smart_findings(good, "/dev/nvme0") == []


def test_smartctl_on_a_virtual_disk_here_is_not_health_data():
    """Recorded on this VM: smartctl -x -j /dev/vda (virtio) cannot detect the device type."""
    rep = smartctl.parse(read("smartctl/here-vda-virtio.json"))
    assert rep.exit_status == 1 and rep.passed is None
    assert rep.exit_meaning == [smartctl.EXIT_BITS[0]]
    assert "Unable to detect device type" in rep.messages[0]
    assert [f.code for f in fsinspect.smart_findings(rep, "/dev/vda")] == []


def test_nvme_cli_real_smart_log_and_error_log():
    """nvme-cli 2.3 on QEMU's emulated NVMe controller (lab VM): a healthy log page, and an
    error log whose 64 slots are all empty (QEMU logs no errors) -> no findings."""
    import json

    data = json.loads(read("nvme/vm-single-smart-log-nvme0-after.json"))
    h = nvme.parse_health(data)
    assert (h.critical_warning, h.media_errors, h.error_log_entries) == (0, 0, 0)
    assert h.percentage_used == 0 and h.unsafe_shutdowns == 0
    assert fsinspect.nvme_findings(h, "/dev/nvme0") == []
    log = json.loads(read("nvme/vm-single-error-log-nvme0-after.json"))
    assert "phase_tag" in log["errors"][0]  # 2.x: status_field is already without it
    assert nvme.parse_error_log(log) == []
    rep = smartctl.parse(read("nvme/vm-single-smartctl-x-j-nvme0-after.json"))
    assert rep.nvme_health is not None
    assert fsinspect.smart_findings(rep, "/dev/nvme0") == []


def test_nvme_error_log_media_errors_in_the_real_key_layout():
    """The recorded nvme-cli 2.3 entry layout, with one slot filled as a drive that failed a
    read would fill it: status type 2 (media) code 0x81 (unrecovered read error) at LBA 4096."""
    import json

    log = json.loads(read("nvme/vm-single-error-log-nvme0-after.json"))
    entry = dict(log["errors"][0], error_count=7, sqid=3, cmdid=0x41,
                 status_field=(2 << 8) | 0x81, lba=4096, nsid=1)
    other_ns = dict(entry, error_count=6, lba=10, nsid=2)
    admin = dict(entry, error_count=5, sqid=0, status_field=0x0002, lba=0, nsid=0)
    entries = nvme.parse_error_log({"errors": [entry, other_ns, admin, log["errors"][0]]})
    assert [e.error_count for e in entries] == [7, 6, 5]
    assert entries[0].describe() == ("#7: media and data integrity: unrecovered read error on "
                                     "I/O queue 3 at LBA 4096 (nsid 1)")
    assert not entries[2].is_media_error
    (f,) = fsinspect.nvme_error_findings(entries, "/dev/nvme0n1", 512, nsid=1)
    assert f.code == "NV006"
    assert f.details["byte_ranges"] == [{"nsid": 1, "start": 4096 * 512, "end": 4097 * 512}]
    # nvme-cli 1.x printed the raw field (phase tag in bit 0) and no phase_tag key
    old = {k: v for k, v in entry.items() if k != "phase_tag"}
    old["status_field"] = ((2 << 8) | 0x81) << 1 | 1
    assert nvme.parse_error_log({"errors": [old]})[0].status_code == 0x81


def test_nvme_critical_bits_with_real_key_names():
    import json

    data = json.loads(read("nvme/vm-single-smart-log-nvme0-after.json"))
    data.update({"critical_warning": 0b1100, "avail_spare": 3, "spare_thresh": 10,
                 "percent_used": 104})
    h = nvme.parse_health(data)
    assert h.critical_meaning == [nvme.CRIT_BITS[2], nvme.CRIT_BITS[3]]
    codes = sorted(f.code for f in fsinspect.nvme_findings(h, "/dev/nvme0n1"))
    assert codes == ["NV001", "NV003", "NV004"]


def _sysfs_tree(snapshot: str, root):
    """Rebuild the recorded sysfs entries (realpath, device link, attributes) under ``root``."""
    from pathlib import Path

    entries = {}
    for block in snapshot.split("== ")[1:]:
        lines = block.splitlines()
        attrs = dict(ln.split(": ", 1) for ln in lines[1:] if ": " in ln)
        real = Path(str(root) + attrs["realpath"])
        real.mkdir(parents=True, exist_ok=True)
        for k, v in attrs.items():
            if k not in {"realpath", "device", "dev", "slaves", "holders"} and v != "-":
                (real / k).write_text(v + "\n")
        entries[lines[0].strip()] = (real, attrs)
    for real, attrs in entries.values():
        if attrs.get("device", "-") != "-":
            target = Path(str(root) + attrs["device"])
            target.mkdir(parents=True, exist_ok=True)
            (real / "device").symlink_to(target)
    return entries


def test_two_namespaces_of_one_nvme_drive_are_one_physical_leaf(tmp_path):
    """sysfs recorded in the lab VM (QEMU NVMe controller, namespaces 1 and 2): each namespace
    has its own wwid, but both sit on one controller of one subsystem -> one identity."""
    import os

    from ckptrescue.storage import samedisk

    tree = _sysfs_tree(read("sysfs/nvme-single.txt"), tmp_path)
    ns1, ns2 = tree["/sys/class/block/nvme0n1"], tree["/sys/class/block/nvme0n2"]
    assert ns1[1]["wwid"] != ns2[1]["wwid"]
    ids = {samedisk.nvme_identity(type(tmp_path)(os.path.realpath(ns[0] / "device")))
           for ns in (ns1, ns2)}
    assert ids == {"nvme-subsystem:nqn.2019-08.org.qemu:CKR0001#CKR0001"}


def test_nvme_multipath_namespace_and_both_controllers_are_one_drive(tmp_path):
    """sysfs recorded with two controllers of one NVM subsystem sharing namespace 1 (native
    multipath): the namespace's device is the subsystem; the same identity as either
    controller, so an image of one path onto the other would be refused as the same media."""
    import os

    from ckptrescue.storage import samedisk

    tree = _sysfs_tree(read("sysfs/nvme-subsys.txt"), tmp_path)
    ns = tree["/sys/class/block/nvme0n1"][0]
    ids = {samedisk.nvme_identity(type(tmp_path)(os.path.realpath(ns / "device")))}
    for ctrl in ("/sys/class/nvme/nvme0", "/sys/class/nvme/nvme1"):
        ids.add(samedisk.nvme_identity(tree[ctrl][0]))
    assert ids == {"nvme-subsystem:nqn.2019-08.org.qemu:nqn.2026-11.io.ckptrescue:subsys0"
                   "#CKR0002"}


def test_nvme_critical_warning_recorded_from_qemu():
    """QEMU's smart_critical_warning=12 (reliability degraded + media read-only): smartctl
    exits 8 with passed=false, nvme-cli reports critical_warning 12."""
    import json

    rep = smartctl.parse(read("nvme/vm-critwarn-smartctl-x-j-nvme0.json"))
    assert rep.exit_status == 8 and rep.passed is False
    codes = sorted(f.code for f in fsinspect.smart_findings(rep, "/dev/nvme0"))
    assert codes == ["NV001", "SM001"]
    h = nvme.parse_health(json.loads(read("nvme/vm-critwarn-smart-log-nvme0.json")))
    assert h.critical_meaning == [nvme.CRIT_BITS[2], nvme.CRIT_BITS[3]]
    assert [f.code for f in fsinspect.nvme_findings(h, "/dev/nvme0")] == ["NV001"]
