"""XFS: ``mount -o ro,norecovery`` (+ ``nouuid`` for a clone of a mounted XFS), inspection,
offline block mapping with ``xfs_db -r``, kernel log patterns.

Inspection: ``xfs_info``, ``xfs_db -r -c "sb 0" -c print``, ``xfs_db -r -c version``,
``xfs_logprint -t`` (CLEAN/DIRTY; head/tail are not in the superblock; a dirty log is copied into
the case first with ``xfs_logprint -C``), NEEDSREPAIR (``features_incompat & 0x10``) and
``features_log_incompat``, ``xfs_repair -n`` (rc 1 on corruption *and* on a dirty log).

Offline: ``convert daddr D fsblock`` (fsblocks are AG-encoded: daddr/8 is wrong outside AG 0),
``blockget -n`` + ``blockuse -n`` (owner inode and path), then ``inode I`` + ``bmap`` for the file
offset. Files are named, not reconstructed (no tensors offline).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ckptrescue.effects import output_dirs
from ckptrescue.effects.runner import SubprocessRunner
from ckptrescue.model import Finding, JsonObject, Severity
from ckptrescue.storage import sysfs
from ckptrescue.storage.filesystem import (
    Facts,
    Filesystem,
    OfflineMap,
    inspect_finding,
    run_tool,
)
from ckptrescue.storage.hits import FileHit, RangeHits, merge_all
from ckptrescue.storage.locate_offline import blocks as block_pieces
from ckptrescue.storage.locate_offline import run_text
from ckptrescue.storage.parsers import xfs_db, xfs_logprint

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

_run = run_tool
_f = inspect_finding
XFS_INCOMPAT_NEEDSREPAIR = 0x10
XFS_SYSFS = ("log/log_head_lsn", "log/log_tail_lsn", "log/reserve_grant_head_bytes",
             "log/write_grant_head_bytes")
KERNEL_PATTERN = re.compile(r"XFS \([^)]*\): .*(corrupt|Corruption|shut down|log I/O error|"
                            r"metadata I/O error|Metadata CRC error)", re.IGNORECASE)


class Xfs(Filesystem):
    name: ClassVar[str] = "xfs"
    title: ClassVar[str] = "XFS"
    types: ClassVar[tuple[str, ...]] = ("xfs",)
    order: ClassVar[int] = 10
    read_only: ClassVar[str] = "ro,norecovery"  # a plain ro mount replays a dirty log
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (("xfs", KERNEL_PATTERN),)
    sysfs_dir: ClassVar[str | None] = "xfs"
    sysfs_attrs: ClassVar[tuple[str, ...]] = XFS_SYSFS

    @classmethod
    def clone_options(cls, runner: SubprocessRunner, fsinfo: dict[str, str],
                      target: str | Path) -> tuple[str, list[Finding]]:
        """XFS refuses a second filesystem with a mounted one's UUID: ``nouuid`` (MT002)."""
        from ckptrescue.storage.candidates import mounted_uuids

        uuid = fsinfo.get("UUID")
        if uuid and uuid in mounted_uuids(runner, "xfs"):
            return ",nouuid", [Finding("MT002", Severity.WARNING, f"{target} is a clone of a "
                                       f"mounted XFS filesystem (UUID {uuid}); mounted with "
                                       "nouuid", evidence=str(target), source="mount")]
        return "", []

    @classmethod
    def inspect(cls, runner: SubprocessRunner, node: str, fsinfo: dict[str, str], ev: str, *,
                case: Case | None, target: str) -> Facts | None:
        return inspect_xfs(runner, node, ev, case)

    @classmethod
    def locate_offline(cls, case: Case, runner: SubprocessRunner, node: str,
                       ranges: list[tuple[int, int]], start: int) -> OfflineMap | None:
        hits = merge_all(locate_blocks(runner, node, ranges, start))
        return OfflineMap(hits, "xfs_db",
                          "unavailable (not mounted; XFS files are not reconstructed offline)")


FILESYSTEMS = [Xfs]


def preserve_xfs_log(runner: SubprocessRunner, case: Case, dev: str) -> JsonObject:
    """Copy the internal log (``xfs_logprint -C``) into the case before anything else reads
    the filesystem: it is exactly what a replay would consume."""
    tmp = output_dirs.claim(case, tempfile.mkdtemp(prefix="xfs-log-", dir=case.work_dir),
                            purpose="xfs_logprint -C") / "xfs-log.bin"
    res = _run(runner, "xfs_logprint", "-C", str(tmp), dev, purpose="preserve the XFS log")
    out: dict[str, Any] = {"returncode": res.returncode}
    if res.returncode == 0 and tmp.exists():
        out["sha256"] = case.store_artifact_file(tmp, name="xfs-log.bin", kind="xfs-log")
        out["size"] = tmp.stat().st_size
    if tmp.exists():
        tmp.unlink()
    return out


def inspect_xfs(runner: SubprocessRunner, dev: str, ev: str,
                case: Case | None = None) -> tuple[dict[str, Any], list[Finding]]:
    facts: JsonObject = {}
    out: list[Finding] = []
    info = _run(runner, "xfs_info", dev, purpose="xfs geometry")
    facts["xfs_info"] = info.stdout.strip()
    sb_res = _run(runner, "xfs_db", "-r", "-c", "sb 0", "-c", "print", dev,
                  purpose="xfs superblock")
    sb = xfs_db.parse_print(sb_res.stdout)
    facts["superblock"] = sb
    if sb.get("magicnum") != "0x58465342" or "(correct)" not in sb.get("crc", "(correct)"):
        out.append(_f("XF006", Severity.ERROR, f"XFS superblock 0 magic {sb.get('magicnum')!r} "
                      f"crc {sb.get('crc')!r}", ev, stderr=sb_res.stderr.strip()[:2000]))
    ver = _run(runner, "xfs_db", "-r", "-c", "version", dev, purpose="xfs features")
    facts["version"] = ver.stdout.strip()
    incompat = xfs_db.as_int(sb.get("features_incompat")) or 0
    log_incompat = xfs_db.as_int(sb.get("features_log_incompat")) or 0
    if incompat & XFS_INCOMPAT_NEEDSREPAIR:
        out.append(_f("XF002", Severity.CRITICAL, "XFS NEEDSREPAIR is set: a repair was started "
                      "and not finished; the kernel refuses to mount", ev,
                      features_incompat=hex(incompat)))
    if log_incompat:
        out.append(_f("XF003", Severity.WARNING, f"XFS features_log_incompat={log_incompat:#x}: "
                      "log replay needs a kernel that knows these log items", ev))
    if xfs_db.as_int(sb.get("inprogress")):
        out.append(_f("XF005", Severity.CRITICAL, "XFS superblock inprogress=1", ev))
    lp = _run(runner, "xfs_logprint", "-t", dev, purpose="xfs log state")
    state = xfs_logprint.parse(lp.stdout)
    if state is not None:
        facts["log"] = {"tail": state.tail, "head": state.head, "state": state.state,
                        "daddr": state.daddr, "length": state.length}
        if state.dirty and case is not None:
            facts["log_copy"] = preserve_xfs_log(runner, case, dev)
        if state.dirty:
            out.append(_f("XF001", Severity.ERROR, f"XFS log is DIRTY (tail {state.tail}, head "
                          f"{state.head}): mount only with ro,norecovery; replay only on a copy",
                          ev, **facts["log"]))
        else:
            out.append(_f("XF007", Severity.INFO, "XFS log is clean", ev, **facts["log"]))
    mounted = sysfs.mounts_of_device(sysfs.dev_name(dev))
    if mounted and not all(m.readonly for m in mounted):
        facts["xfs_repair_n"] = {"skipped": "mounted read-write on "
                                 + ", ".join(m.mountpoint for m in mounted)}
        return facts, out
    rep = _run(runner, "xfs_repair", "-n", dev, purpose="xfs no-modify check", timeout=3600)
    facts["xfs_repair_n"] = {"returncode": rep.returncode,
                             "alerts": [ln for ln in (rep.stdout + rep.stderr).splitlines()
                                        if "ALERT" in ln or "would" in ln.lower()][:50]}
    if rep.returncode not in (0, None):
        dirty_only = state is not None and state.dirty
        out.append(_f("XF004", Severity.ERROR,
                      f"xfs_repair -n exited {rep.returncode}"
                      + (" (the dirty log alone makes it report; findings may be spurious)"
                         if dirty_only else ""), ev, **facts["xfs_repair_n"]))
    return facts, out


def locate_blocks(runner: SubprocessRunner, dev: str, ranges: list[tuple[int, int]],
         start: int) -> list[RangeHits]:
    sb = xfs_db.parse_print(run_text(runner, ["xfs_db", "-r", "-c", "sb 0", "-c", "print", dev],
                                 "xfs superblock"))
    bs = xfs_db.as_int(sb.get("blocksize")) or 4096
    pieces = block_pieces(ranges, start, bs)
    out = [RangeHits(s, e) for s, e in ranges]
    if not pieces:
        return out
    conv = ["xfs_db", "-r"]
    for _i, lo, _hi in pieces:
        conv += ["-c", f"convert daddr {lo // 512} fsblock"]
    fsblocks = xfs_db.parse_convert(run_text(runner, [*conv, dev], "daddr -> fsblock"))
    use = ["xfs_db", "-r", "-c", "blockget -n"]
    for fsb in fsblocks:
        use += ["-c", f"fsblock {fsb}", "-c", "blockuse -n"]
    owners = {u.fsblock: u for u in xfs_db.parse_blockuse(run_text(runner, [*use, dev],
                                                                "block owners"))}
    inodes = sorted({u.inode for u in owners.values() if u.inode is not None and u.type == "data"})
    bmaps: dict[int, list[xfs_db.BmapExtent]] = {}
    if inodes:
        bm = ["xfs_db", "-r"]
        for ino in inodes:
            bm += ["-c", f"echo @@{ino}", "-c", f"inode {ino}", "-c", "bmap"]
        for key, text in xfs_db.split_echo_sections(run_text(runner, [*bm, dev], "bmap")).items():
            bmaps[int(key)] = xfs_db.parse_bmap(text)
    for (i, lo, hi), fsb in zip(pieces, fsblocks, strict=False):
        owner = owners.get(fsb)
        if owner is None or owner.inode is None or owner.type != "data":
            continue
        file_off = None
        for ext in bmaps.get(owner.inode, []):
            if ext.fork == "data" and ext.startblock <= fsb < ext.startblock + ext.count:
                file_off = (ext.offset + fsb - ext.startblock) * bs + lo % bs
        out[i].files.append(FileHit(owner.path or f"<inode {owner.inode}>",
                                    file_off if file_off is not None else -1, hi - lo))
    return out
