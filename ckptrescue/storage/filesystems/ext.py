"""ext2/ext3/ext4: ``mount -o ro,noload`` (ext3/4; ext2 has no journal: ``ro``), inspection,
offline block mapping with ``debugfs``, kernel log patterns, the live error counters.

Inspection: ``dumpe2fs -h`` (needs_recovery, state, error count and first/last error); when
mounted, ``/sys/fs/ext4/DEV/errors_count`` and friends.

Offline: ``debugfs -c`` (catastrophic mode: damaged bitmaps do not stop it) ``icheck`` (block ->
inode), ``ncheck`` (inode -> path), ``ex <I>`` (extents, for the file offset). When even the
primary superblock is unreadable (blkid finds nothing), the first readable backup superblock
(32768/4 KiB, 16384/2 KiB, 8193/1 KiB) is used (``debugfs -s SB -b BS``). Files that were hit
are rebuilt from their extents (read-only reads of the device, unreadable bytes as zeros) into
``CASE/work/offline-files/`` and run through the tensor map.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ckptrescue.checkpoints.formats.chunked import iter_chunks
from ckptrescue.effects.files import named_file, open_own_file
from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.model import Finding, Severity
from ckptrescue.storage.filesystem import (
    EVIDENCE_MOUNT_OPTIONS,
    Facts,
    Filesystem,
    OfflineMap,
    inspect_finding,
    run_tool,
)
from ckptrescue.storage.hits import FileHit, RangeHits, merge_all
from ckptrescue.storage.locate_offline import blocks as block_pieces
from ckptrescue.storage.locate_offline import run_text
from ckptrescue.storage.parsers import debugfs as dbg
from ckptrescue.storage.parsers import dumpe2fs

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

_run = run_tool
_f = inspect_finding
EXT4_SYSFS = ("errors_count", "first_error_time", "first_error_func", "first_error_block",
              "first_error_ino", "first_error_errcode", "last_error_time", "last_error_func",
              "last_error_block", "last_error_ino", "last_error_errcode", "lifetime_write_kbytes")
KERNEL_PATTERN = re.compile(r"EXT4-fs (error|warning)|EXT4-fs \([^)]*\): (error|warning|"
                            r"Remounting filesystem read-only)|JBD2: .*error", re.IGNORECASE)


class Ext(Filesystem):
    name: ClassVar[str] = "ext"
    title: ClassVar[str] = "ext2/3/4"
    types: ClassVar[tuple[str, ...]] = ("ext2", "ext3", "ext4")
    order: ClassVar[int] = 20
    read_only: ClassVar[str] = "ro,noload"  # ext3/4: a plain ro mount replays the journal
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (("ext4", KERNEL_PATTERN),)
    sysfs_dir: ClassVar[str | None] = "ext4"
    sysfs_attrs: ClassVar[tuple[str, ...]] = EXT4_SYSFS

    @classmethod
    def mount_options(cls, fstype: str, kernel: str | None = None) -> str:
        # ext2 has no journal to replay (and does not know noload)
        return ("ro" if fstype == "ext2" else cls.read_only) + EVIDENCE_MOUNT_OPTIONS

    @classmethod
    def inspect(cls, runner: SubprocessRunner, node: str, fsinfo: dict[str, str], ev: str, *,
                case: Case | None, target: str) -> Facts | None:
        return inspect_ext(runner, node, ev)

    @classmethod
    def mounted_findings(cls, live: dict[str, Any], found: list[Finding],
                         ev: str) -> list[Finding]:
        errors = int((live.get("ext4") or {}).get("errors_count") or 0)
        if errors and not any(f.code == "E4003" for f in found):
            return [_f("E4003", Severity.ERROR, f"ext4 (mounted) has recorded {errors} error(s)",
                       ev, **live["ext4"])]
        return []

    @classmethod
    def locate_offline(cls, case: Case, runner: SubprocessRunner, node: str,
                       ranges: list[tuple[int, int]], start: int) -> OfflineMap | None:
        hits = merge_all(locate_blocks(runner, node, ranges, start))
        return OfflineMap(hits, "debugfs", rebuild_and_map(case, runner, node, hits, None))

    @classmethod
    def locate_unidentified(cls, case: Case, runner: SubprocessRunner, node: str,
                            ranges: list[tuple[int, int]], start: int) -> OfflineMap | None:
        backup = backup_superblock(runner, node)
        if backup is None:
            return None
        hits = merge_all(locate_blocks(runner, node, ranges, start, backup=backup))
        return OfflineMap(hits, f"debugfs (backup superblock {backup[1]}, block size {backup[0]})",
                          rebuild_and_map(case, runner, node, hits, backup),
                          fstype="ext (primary superblock unreadable)")


FILESYSTEMS = [Ext]


def inspect_ext(runner: SubprocessRunner, dev: str, ev: str) -> tuple[dict[str, Any],
                                                                      list[Finding]]:
    res = _run(runner, "dumpe2fs", "-h", dev, purpose="ext superblock")
    sb = dumpe2fs.parse(res.stdout)
    facts = {"dumpe2fs": sb.to_json()}
    out: list[Finding] = []
    if sb.needs_recovery:
        out.append(_f("E4001", Severity.ERROR, "ext4 journal needs recovery (needs_recovery): "
                      "mount only with ro,noload; replay only on a copy", ev,
                      journal_start=sb.fields.get("Journal start")))
    elif "has_journal" in sb.features:
        out.append(_f("E4004", Severity.INFO, "ext4 journal is clean", ev))
    if sb.state and sb.state != "clean":
        out.append(_f("E4002", Severity.ERROR, f"ext4 filesystem state: {sb.state}", ev))
    if sb.error_count or sb.errors:
        out.append(_f("E4003", Severity.ERROR, f"ext4 recorded {sb.error_count} error(s)", ev,
                      **sb.errors))
    return facts, out


# (block size, first backup superblock) for ext2/3/4 with sparse_super
EXT_BACKUPS = ((4096, 32768), (2048, 16384), (1024, 8193))


def backup_superblock(runner: SubprocessRunner, dev: str) -> tuple[int, int] | None:
    """(block size, superblock) of the first readable ext backup superblock, if any."""
    for bs, sb in EXT_BACKUPS:
        res = runner.run(ToolCall.of("dumpe2fs", "-o", f"superblock={sb}", "-o",
                                     f"blocksize={bs}", "-h", dev, timeout_s=120,
                                     purpose="look for an ext backup superblock"))
        if res.returncode == 0 and "Block size:" in res.stdout:
            return bs, sb
    return None


def rebuild_and_map(case: Case, runner: SubprocessRunner, dev: str, hits: list[RangeHits],
                 backup: tuple[int, int] | None) -> str:
    """Rebuild each hit file from its extents (read-only reads of the device, written into the
    case's work dir; unreadable bytes are zeros as in the image) and run the tensor map on it."""
    from ckptrescue.storage.locate import tensor_names

    opts, bs = debugfs_view(runner, dev, backup)
    inodes = {h.path: h.inode for r in hits for h in r.files if h.inode is not None}
    if not inodes:
        return "no files hit"
    work = case.work_dir / "offline-files"
    work.mkdir(exist_ok=True)
    copies: dict[str, Path] = {}
    for path, ino in sorted(inodes.items()):
        stat_text = run_text(runner, ["debugfs", *opts, "-R", f"stat <{ino}>", dev], "inode size")
        size = dbg.parse_stat_size(stat_text)
        exts = dbg.parse_extents(run_text(runner, ["debugfs", *opts, "-R", f"ex <{ino}>", dev],
                                      "extents"))
        if size is None or not exts:
            continue
        out = work / f"{ino}-{Path(path).name}"
        fd = open_own_file(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # (a FIFO never blocks)
        with named_file(fd, "wb", out) as dst, open(dev, "rb", buffering=0) as src:
            dst.truncate(size)
            for e in exts:
                if "Uninit" in e.flags:
                    continue  # unwritten extent: reads as zeros
                src.seek(e.physical * bs)
                dst.seek(e.logical * bs)
                for block in iter_chunks(src, min(e.length * bs, max(0, size - e.logical * bs))):
                    dst.write(block)
        copies[path] = out
    case.log("locate.offline_copies", {p: str(c) for p, c in copies.items()})
    return tensor_names(case, work, hits, resolve=copies.get)


def block_size(runner: SubprocessRunner, dev: str) -> int:
    for line in run_text(runner, ["dumpe2fs", "-h", dev], "ext superblock").splitlines():
        if line.startswith("Block size:"):
            return int(line.split(":")[1])
    return 4096


def debugfs_view(runner: SubprocessRunner, dev: str,
                 backup: tuple[int, int] | None) -> tuple[list[str], int]:
    """debugfs's options and the block size it counts in: catastrophic mode (``-c``: the
    bitmaps, which may sit on the bad sectors, are not read), through the backup superblock
    (``-s SB -b BS``) when the primary one is unreadable."""
    if backup:
        return ["-c", "-s", str(backup[1]), "-b", str(backup[0])], backup[0]
    return ["-c"], block_size(runner, dev)


def locate_blocks(runner: SubprocessRunner, dev: str, ranges: list[tuple[int, int]], start: int, *,
         backup: tuple[int, int] | None = None) -> list[RangeHits]:
    opts, bs = debugfs_view(runner, dev, backup)
    pieces = block_pieces(ranges, start, bs)
    out = [RangeHits(s, e) for s, e in ranges]
    if not pieces:
        return out
    blocks = sorted({lo // bs for _i, lo, _hi in pieces})
    owner = dbg.parse_icheck(run_text(runner, ["debugfs", *opts, "-R", "icheck " + " ".join(
        map(str, blocks)), dev], "block -> inode"))
    inodes = sorted({i for i in owner.values() if i is not None})
    names = dbg.parse_ncheck(run_text(runner, ["debugfs", *opts, "-R", "ncheck " + " ".join(
        map(str, inodes)), dev], "inode -> path")) if inodes else {}
    exts = {ino: dbg.parse_extents(run_text(runner, ["debugfs", *opts, "-R", f"ex <{ino}>", dev],
                                        "extents")) for ino in inodes}
    for i, lo, hi in pieces:
        blk = lo // bs
        ino = owner.get(blk)
        if ino is None:
            continue
        file_off = -1
        for e in exts.get(ino, []):
            if e.physical <= blk < e.physical + e.length:
                file_off = (e.logical + blk - e.physical) * bs + lo % bs
        for path in names.get(ino, [f"<inode {ino}>"]):
            out[i].files.append(FileHit(path, file_off, hi - lo, inode=ino))
    return out
