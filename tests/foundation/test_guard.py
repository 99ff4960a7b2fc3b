"""Table tests of the safety guard: every dangerous form refused with its reason, read-only
forms allowed. Pure: no command runs."""

from __future__ import annotations

import os

import pytest

from ckptrescue.guard import GuardContext, check
from ckptrescue.guard import kernel as k
from ckptrescue.guard.samedisk import Comparison, Sameness

# A kernel as the table sees it: this case attached /dev/loop3 (7:3), mounted /mnt/x (mount id
# 100), assembled ckr-1a2b-vg-data and imported tank_ckr read-only — and the kernel still shows
# each with the recorded identity.
_LOOP = k.Loop("/dev/loop3", os.makedev(7, 3), os.makedev(8, 1), 1234, "/evidence/disk.img", 0,
               0, True)
_MOUNT = k.Mount(100, 1, os.makedev(7, 3), "/", "/mnt/x", "ext4", "/dev/loop3", True)
_DM = k.Dm("ckr-1a2b-vg-data", os.makedev(253, 1), "", True)
_POOL = k.Pool("tank_ckr", "1234567", True)
KERNEL = k.Snapshot({_LOOP.rdev: _LOOP}, {100: _MOUNT}, {_DM.name: _DM}, {_POOL.name: _POOL})
_RDEVS = {"/dev/loop3": _LOOP.rdev, "/dev/block/7:3": _LOOP.rdev,
          "/dev/loop4": os.makedev(7, 4), "/dev/sda": os.makedev(8, 0)}

CTX = GuardContext(
    evidence_paths=("/evidence/disk.img", "/mnt/evidence"),
    is_block_device=lambda p: p.startswith("/dev/"),
    attachments=(k.of_loop(_LOOP), k.of_mount(_MOUNT), k.of_dm(_DM)),
    kernel_snapshot=lambda pools: KERNEL, block_rdev=_RDEVS.get,
    device_node={r: p for p, r in _RDEVS.items() if not p.startswith("/dev/block/")}.get,
    device_read_only=lambda p: p in {"/dev/loop3", "/dev/block/7:3"},
    device_reach=lambda rdev: k.Reach(frozenset({rdev}), frozenset(), ()),
    compare_media=lambda src, dest: Comparison(Sameness.DIFFERENT, (), (), "test: other media"),
    is_empty_dir=lambda p: p.startswith("/mnt/"),
)
NS = ",nosuid,nodev,noexec"  # every evidence mount carries these

REFUSED = [
    # (argv, a word the reason must contain)
    ("fsck -y /dev/loop0", "-y"),
    ("fsck /dev/sda1", "-n"),
    ("e2fsck -p /dev/sda1", "-y/-p/-a"),
    ("e2fsck -f /dev/sda1", "-n"),
    ("fsck.ext4 -y /dev/sdb1", "-y"),
    ("fsck.xfs /dev/sdb1", "-n"),
    ("xfs_repair /dev/sdb1", "-n"),
    ("xfs_repair -L /dev/sdb1", "zeroes the log"),
    ("xfs_repair -n -L /dev/sdb1", "zeroes the log"),
    ("chkdsk /f", "repairs"),
    ("mkfs.xfs /dev/sdb1", "creates a filesystem"),
    ("mkfs -t ext4 /dev/sdb1", "creates a filesystem"),
    ("mke2fs /dev/sdb1", "creates a filesystem"),
    ("wipefs -a /dev/sdb", "erases"),
    ("parted /dev/sdb mklabel gpt", "write"),
    ("fdisk /dev/sdb", "edits"),
    ("sfdisk /dev/sdb", "writes"),
    ("sgdisk -Z /dev/sdb", "writes"),
    ("blkdiscard /dev/sdb", "discards"),
    ("dd if=/evidence/disk.img of=/dev/sdb bs=1M", "block device"),
    ("dd if=/dev/zero of=/evidence/disk.img", "evidence"),
    ("dc3dd if=/dev/sda of=/dev/sdb", "block device"),
    ("ddrescue -f /dev/sda /dev/sdb /tmp/map", "--force"),
    ("ddrescue /dev/sda /dev/sdb /tmp/map", "block device"),
    ("ddrescue /dev/sda /evidence/disk.img /tmp/map", "evidence"),
    ("ddrescue /dev/sda /tmp/out.img", "mapfile"),
    ("mount /dev/loop0 /mnt/x", "ro"),
    ("mount -o rw -t xfs /dev/loop0 /mnt/x", "read-only"),
    ("mount -o ro -t xfs /dev/loop0 /mnt/x", "norecovery"),
    ("mount -o ro -t ext4 /dev/loop0 /mnt/x", "noload"),
    ("mount -o ro,noload -t xfs /dev/loop0 /mnt/x", "norecovery"),
    ("mount -o ro /dev/loop0 /mnt/x", "-t"),
    ("mount -o remount,rw /mnt/x", "remount"),
    ("mount -o remount,ro /mnt/x", "remount"),
    ("losetup --find --show /evidence/disk.img", "--read-only"),
    ("losetup -D", "every loop device"),
    ("blockdev --setrw /dev/sdb", "changes"),
    ("blockdev --flushbufs /dev/sdb", "changes"),
    ("zpool clear tank", "clear"),
    ("zpool import tank", "readonly=on"),
    ("zpool import -f tank", "-f forces"),
    ("zpool import -f -o readonly=on tank", "-N"),
    ("zpool import -F -o readonly=on -N tank", "-F"),
    ("zpool import -o readonly=on tank", "-N"),
    # the pool's mountpoints come from the evidence: only under an empty -R directory of yours
    ("zpool import -o readonly=on -N tank", "-R ALTROOT"),
    ("zpool import -o readonly=on -N -R /mnt/evidence tank", "evidence"),
    ("zpool import -o readonly=on -N -R /etc/x tank", "/etc"),
    ("zfs mount -o ro tank_ckr/ds", "nosuid"),
    ("zfs mount -o ro,nosuid,nodev,noexec tank/ds", "not a dataset of a pool this case"),
    ("zpool scrub tank", "scrub"),
    ("zpool events -c", "clears"),
    ("zfs set compression=off tank/ds", "changes"),
    ("zfs rollback tank/ds@snap", "changes"),
    ("zfs destroy tank/ds", "changes"),
    ("zfs import -N tank", "zpool import"),
    ("mdadm --assemble /dev/md0 /dev/sda1 /dev/sdb1", "assemble"),
    ("mdadm --create /dev/md0 --level=1 /dev/sda1 /dev/sdb1", "create"),
    ("mdadm --grow /dev/md0 --raid-devices=3", "grow"),
    ("vgchange -ay vg0", "activate"),
    ("lvchange -ay vg0/lv", "activate"),
    ("nvme format /dev/nvme0n1", "erases"),
    ("nvme sanitize /dev/nvme0", "erases"),
    ("nvme create-ns /dev/nvme0", "namespaces"),
    ("nvme delete-ns /dev/nvme0 -n 1", "namespace"),
    ("nvme fw-download /dev/nvme0 -f fw.bin", "firmware"),
    ("smartctl -t long /dev/sda", "self-tests"),
    ("smartctl -s on /dev/sda", "settings"),
    ("hdparm -W0 /dev/sda", "settings"),
    ("hdparm --security-erase x /dev/sda", "settings"),
    ("dmesg -c", "clears"),
    ("dmesg -C", "clears"),
    ("journalctl --vacuum-time=1d", "deletes"),
    ("journalctl --rotate", "changes"),
    ("sync", "flush"),
    ("xfs_db -x -c 'sb 0' /dev/sdb1", "-x"),
    ("xfs_db -c 'sb 0' /dev/sdb1", "-r"),
    ("xfs_db -r -c write /dev/sdb1", "modifies"),
    ("xfs_db -r -c logformat /dev/sdb1", "modifies"),
    ("xfs_io -x -c shutdown /mnt/x", "-x"),
    ("debugfs -w /dev/sdb1", "read-write"),
    ("debugfs -R 'rm /x' /dev/sdb1", "allowlist"),
    ("tune2fs -O ^has_journal /dev/sdb1", "tune2fs -l"),
    ("rsync -a --delete /mnt/src/ /tmp/dst/", "--delete"),
    ("rsync -a --remove-source-files /mnt/src/ /tmp/dst/", "deletes"),
    ("rsync -a --read-only /mnt/src/ /tmp/dst/", "not an rsync client option"),
    ("rsync -a /tmp/src/ /mnt/evidence/", "evidence"),
    ("find /mnt/x -delete", "-delete"),
    ("find /mnt/x -exec rm {} ;", "-exec"),
    ("rm -rf /mnt/x", "deletes"),
    ("bash -c 'ls'", "shell"),
    ("kill -9 1234", "whom to stop"),
    ("systemctl restart kubelet", "whom to stop"),
    ("fuser -k /mnt/x", "kills"),
    ("xfs_admin -U generate /dev/sdb1", "changes"),
    ("some-unknown-tool --flag", "allowlist"),
    ("mount -t auto -o ro /dev/loop0 /mnt/x", "exactly one filesystem type"),
    ("mount -t xfs,ext4 -o ro,norecovery /dev/loop0 /mnt/x", "exactly one filesystem type"),
    ("mount -t btrfs -o ro /dev/loop0 /mnt/x", "nologreplay"),
    ("mount -t f2fs -o ro /dev/loop0 /mnt/x", "no known read-only"),
    ("zpool import -a", "readonly=on"),
    ("zpool export tank", "readonly=on"),
    ("zpool export -a", "-a/-f"),
    ("dmsetup create vg-data --table '0 8 linear /dev/loop0 0'", "--readonly"),
    ("dmsetup create --readonly vg-data t.table", "ckr-"),
    ("dmsetup create --readonly --concise ckr-a,,,ro,0", "--concise"),
    ("dmsetup create --readonly ckr-a", "table file"),
    ("dmsetup create --readonly ckr-a /nonexistent/t.table", "unreadable"),
    ("dmsetup remove vg-data", "only the kit"),
    ("dmsetup remove --force ckr-1-vg-data", "--force"),
    ("dmsetup reload ckr-1 t.table", "changes device-mapper"),
    ("dmsetup wipe_table vg-data", "changes device-mapper"),
    ("dmsetup remove_all", "changes device-mapper"),
    ("xxd -r dump.hex /dev/sda", "-r"),
    ("xxd /evidence/disk.img out.hex", "output file"),
    ("date -s 2020-01-01", "clock"),
    ("date 010100002020", "clock"),
    ("hostname evil", "sets the host name"),
    ("blkid -c /tmp/cache /dev/sda", "cache"),
    ("ddrescuelog --create-mapfile=x.map list.txt", "creates or deletes"),
    ("ddrescuelog -d map.map", "creates or deletes"),
    ("sfdisk -l --delete /dev/sda 1", "--delete"),
    ("xfs_io -r -c 'extsize 1m' /mnt/x/file", "inode hint"),
    ("udevadm info --cleanup-db", "deletes"),
    ("journalctl --cursor-file=/evidence/x", "--cursor-file"),
    ("nvme telemetry-log /dev/nvme0", "telemetry"),
    ("zpool import -a -o readonly=on -N", "-a imports every pool"),
    ("zpool import -F -n tank", "readonly=on"),
    ("blockdev --setro /dev/sda", "writeblock"),
    ("mount -t xfs -o ro,norecovery /dev/loop3 /mnt/x", "nosuid"),
]

ALLOWED = [
    "xfs_db -r -c 'sb 0' -c print /dev/sdb1",
    "xfs_db -r -c version disk.img",
    "xfs_db -r -c 'convert daddr 196608 fsblock' /dev/sdb1",
    "xfs_db -r -c 'blockget -n' -c 'fsblock 280' -c 'blockuse -n -c 2' -c 'ncheck -i 131' d.img",
    "xfs_info /dev/sdb1",
    "xfs_logprint -t /dev/sdb1",
    "xfs_repair -n /dev/sdb1",
    "xfs_io -r -c 'fiemap -v' /mnt/x/model.ckpt",
    "dumpe2fs -h /dev/sdb1",
    "debugfs -R 'icheck 2565' /dev/sdb1",
    "debugfs -R 'ncheck 12' /dev/sdb1",
    "e2fsck -n /dev/sdb1",
    "e2fsck -fn /dev/sdb1",
    "fsck -n /dev/sdb1",
    "tune2fs -l /dev/sdb1",
    "smartctl -x -j /dev/sda",
    "smartctl -i /dev/sda",
    "nvme smart-log /dev/nvme0 -o json",
    "nvme error-log /dev/nvme0 -o json",
    "nvme list -o json",
    "nvme id-ctrl /dev/nvme0",
    "zpool status -vP",
    "zpool status -j",
    "zpool events -v",
    "zpool list",
    "zpool import",
    "zpool import -o readonly=on -N -R /mnt/alt tank",
    "zpool import -F -n -o readonly=on -N tank",
    "zpool import -f -o readonly=on -o cachefile=none -N -R /mnt/ev -d /dev/loop3 123 tank_ckr",
    "zpool import -t -o readonly=on -N -R /mnt/alt -d /dev/loop3 1234567 tank_ckr",
    "zfs get -Hp checksum,compressratio -r tank",
    "dmsetup table",
    "dmsetup ls --tree",
    "dmsetup info -c --noheadings -o blk_devname ckr-1-vg-data",
    "dmsetup remove --noudevsync ckr-1a2b-vg-data",
    "lsblk -J",
    "lsblk -J -o NAME,PKNAME,MAJ:MIN,TYPE,RO,START,MOUNTPOINTS",
    "blockdev --getsz /dev/sda",
    "blockdev --getss /dev/sda",
    "blockdev --getro /dev/sda",
    "dmesg -x",
    "dmesg -x --time-format iso",
    "journalctl -k -o json --no-pager",
    "losetup --read-only --find --show /evidence/disk.img",
    "losetup -r -f --show -P /evidence/disk.img",
    "losetup -l -J",
    "losetup -d /dev/loop3",
    f"mount -t xfs -o ro,norecovery{NS} /dev/loop3 /mnt/x",
    f"mount -t xfs -o ro,norecovery,nouuid{NS} /dev/loop3 /mnt/x",
    f"mount -t ext4 -o ro,noload{NS} /dev/loop3 /mnt/x",
    f"mount -t ext4 -o ro,norecovery{NS} /dev/loop3 /mnt/x",
    "umount /mnt/x",
    "ddrescue -b 512 -n /dev/sda /tmp/case/img /tmp/case/img.map",
    "ddrescue -d -r3 -b 4096 /dev/sda /tmp/case/img /tmp/case/img.map",
    "ddrescuelog -t /tmp/case/img.map",
    "rsync -aHAXS --numeric-ids -x --open-noatime -i /mnt/evidence/ /tmp/copy/",
    "rsync -aHAXS --numeric-ids -x -c -n -i /mnt/evidence/ /tmp/copy/",
    "sha256sum /evidence/disk.img",
    "mdadm --examine /dev/sda1",
    "mdadm --detail /dev/md0",
    "hdparm -I /dev/sda",
    "fdisk -l /dev/sda",
    "sfdisk --json /dev/sda",
    "find /mnt/x -type f -name '*.pt'",
    "dd if=/dev/sda bs=512 count=1",
    "dd if=/dev/sda of=/tmp/mbr.bin bs=512 count=1",
    "uname -a",
    f"mount -t btrfs -o ro,nologreplay{NS} /dev/loop3 /mnt/x",
    f"mount -t vfat -o ro{NS} /dev/loop3 /mnt/x",
    "xxd -l 512 /dev/sda",
    "date -u +%s",
    "hostname",
    "blkid -p /dev/sda1",
    "ddrescuelog -t map.map",
    "sfdisk --dump /dev/sda",
]


def _argv(text: str) -> list[str]:
    import shlex

    return shlex.split(text)


@pytest.mark.parametrize(("command", "keyword"), REFUSED)
def test_dangerous_forms_are_refused_with_reason(command: str, keyword: str) -> None:
    decision = check(_argv(command), CTX)
    assert not decision.allowed, f"{command!r} must be refused"
    assert keyword in decision.reason, f"{command!r}: reason {decision.reason!r} lacks {keyword!r}"


@pytest.mark.parametrize("command", ALLOWED)
def test_read_only_forms_are_allowed(command: str) -> None:
    decision = check(_argv(command), CTX)
    assert decision.allowed, f"{command!r} refused: {decision.reason}"


def test_table_is_big_enough() -> None:
    assert len(REFUSED) + len(ALLOWED) >= 60


def test_tool_given_as_path_is_judged_by_name() -> None:
    assert not check(["/sbin/fsck", "-y", "/dev/sda1"], CTX).allowed
    assert check(["/usr/sbin/xfs_info", "/dev/sda1"], CTX).allowed


def test_empty_and_non_string_argv_refused() -> None:
    assert not check([], CTX).allowed
    assert not check(["ls", 3], CTX).allowed  # type: ignore[list-item]


def test_zpool_export_only_of_a_pool_this_case_imported_read_only() -> None:
    from dataclasses import replace

    ctx = replace(CTX, attachments=(*CTX.attachments, k.of_pool(_POOL)), pools=lambda: None)
    assert check(["zpool", "export", "tank_ckr"], ctx).allowed
    assert not check(["zpool", "export", "rpool"], ctx).allowed
    assert not check(["zpool", "export", "-f", "tank_ckr"], ctx).allowed
    assert not check(["zpool", "export", "tank_ckr", "rpool"], ctx).allowed
    assert not check(["zpool", "export", "tank_ckr"], CTX).allowed


def test_dmsetup_create_only_read_only_linear_tables(tmp_path) -> None:
    good = tmp_path / "good.table"
    good.write_text("0 8192 linear /dev/loop3 2048\n8192 8192 linear /dev/loop3 40960\n")
    bad = tmp_path / "bad.table"
    bad.write_text("0 8192 linear /dev/loop3 2048\n0 8192 thin-pool /dev/loop3 /dev/loop4 128 0\n")
    ok = ["dmsetup", "create", "--readonly", "--noudevsync", "ckr-1a2b-vg-data", str(good)]
    assert check(ok, CTX).allowed
    assert not check([*ok[:-1], str(bad)], CTX).allowed
    assert not check(["dmsetup", "create", "--noudevsync", "ckr-1a2b-vg-data", str(good)],
                     CTX).allowed


def test_zfs_mount_goes_only_where_a_mount_point_may_be() -> None:
    """A dataset mounts where its (evidence-controlled) mountpoint property says, the altroot
    prefixed: that place must be one a mount point may be — never a host tree, however the
    property spells it — and only for a pool this case imported read-only."""
    from dataclasses import replace

    where = {"tank_ckr/ok": "/mnt/alt/ok", "tank_ckr/up": "/mnt/alt/../../etc/cron.d",
             "tank_ckr/leg": "legacy", "tank_ckr/ev": "/mnt/evidence/x"}
    ctx = replace(CTX, attachments=(*CTX.attachments, k.of_pool(_POOL)),
                  dataset_mountpoint=where.get)
    opts = "ro,nosuid,nodev,noexec"
    assert check(["zfs", "mount", "-o", opts, "tank_ckr/ok"], ctx).allowed
    for ds, word in (("tank_ckr/up", "/etc"), ("tank_ckr/leg", "legacy"),
                     ("tank_ckr/ev", "evidence"), ("tank_ckr/none", "unknown")):
        d = check(["zfs", "mount", "-o", opts, ds], ctx)
        assert not d.allowed and word in d.reason, (ds, d.reason)
    d = check(["zfs", "mount", "-o", "ro,nosuid,nodev,noexec,suid", "tank_ckr/ok"], ctx)
    assert not d.allowed


def test_pool_and_dataset_names_are_never_rewritten_as_paths(tmp_path, monkeypatch) -> None:
    """Host-namespace tools get the device node and path the guard judged in place of what was
    typed; a pool or dataset name is a name, even when a file of that name is in the cwd."""
    from dataclasses import replace

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tank_ckr").mkdir()
    ctx = replace(CTX, attachments=(*CTX.attachments, k.of_pool(_POOL)))
    d = check(["zpool", "export", "tank_ckr"], ctx)
    assert d.allowed and d.pins == ()
    (tmp_path / "disk").symlink_to("/dev/loop3")
    ctx = replace(ctx, block_rdev=lambda p: _RDEVS.get(p) or (_LOOP.rdev if p == "disk" else None))
    d = check(["losetup", "-d", "disk"], ctx)  # a path: given as the judged node
    assert d.allowed and d.argv(["losetup", "-d", "disk"]) == ["losetup", "-d", "/dev/loop3"]


def test_process_relative_paths_are_refused_however_spelt(tmp_path, monkeypatch) -> None:
    """/proc/self/fd/N, /proc/PID/root, /dev/fd/N name one thing to the guard and another to
    the tool: refused when spelt otherwise (``.`` components, relative to the working
    directory) or reached through a symlink on the way."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "root").symlink_to("/proc/self/root")
    (tmp_path / "proc").symlink_to("/proc")
    (tmp_path / "plain").symlink_to("/etc/hostname")
    depth = "/".join([".."] * len(tmp_path.parts))
    for word in ("/proc/./self/fd/0", "/proc//1/./root/etc", f"{depth}/proc/self/cwd",
                 "root/etc/passwd", "proc/self/fd/1", "/dev/stdin", "/proc/thread-self/fd/2"):
        d = check(["cat", word], GuardContext())
        assert not d.allowed and "relative to a process" in d.reason, word
        d = check(["dd", "if=/etc/hostname", f"of={word}"], GuardContext())
        assert not d.allowed, word
    assert check(["cat", "plain"], GuardContext()).allowed
    assert check(["cat", "/proc/cpuinfo"], GuardContext()).allowed
