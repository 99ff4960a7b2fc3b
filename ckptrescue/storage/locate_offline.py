"""``locate`` when the image cannot be mounted: ask the filesystem tools directly (read-only).

XFS: ``xfs_db -r`` ``convert daddr D fsblock`` (fsblocks are AG-encoded: daddr/8 is wrong outside
AG 0), ``blockget -n`` + ``blockuse -n`` (owner inode and path), then ``inode I`` + ``bmap`` for
the file offset. ext2/3/4: ``debugfs`` ``icheck`` (block -> inode), ``ncheck`` (inode -> path),
``ex <I>`` (extents, for the file offset). At most ``MAX_BLOCKS`` blocks are resolved per call.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import EvidenceError, ToolFailedError
from ckptrescue.parsers import debugfs as dbg
from ckptrescue.parsers import xfs_db
from ckptrescue.storage import mounting
from ckptrescue.storage.locate import FileHit, LocateResult, RangeHits, _merge

if TYPE_CHECKING:
    from ckptrescue.case import Case

MAX_BLOCKS = 4096


def _blocks(ranges: list[tuple[int, int]], offset: int, bs: int) -> list[tuple[int, int, int]]:
    """(range index, fs byte start of the piece, piece end) per filesystem block touched."""
    out = []
    for i, (s, e) in enumerate(ranges):
        s, e = max(0, s - offset), max(0, e - offset)
        b = s - s % bs
        while b < e and len(out) < MAX_BLOCKS:
            out.append((i, max(b, s), min(b + bs, e)))
            b += bs
    return out


def _run(runner: SubprocessRunner, argv: list[str], purpose: str) -> str:
    res = runner.run(ToolCall(argv=tuple(argv), timeout_s=600, purpose=purpose))
    if res.refused:
        raise ToolFailedError(f"{argv[0]} refused: {res.refused}")
    if res.returncode != 0 and not res.stdout:
        raise ToolFailedError(f"{argv[0]} failed: {res.stderr.strip()}")
    return res.stdout


# (block size, first backup superblock) for ext2/3/4 with sparse_super
EXT_BACKUPS = ((4096, 32768), (2048, 16384), (1024, 8193))


def _ext_backup(runner: SubprocessRunner, dev: str) -> tuple[int, int] | None:
    """(block size, superblock) of the first readable ext backup superblock, if any."""
    for bs, sb in EXT_BACKUPS:
        res = runner.run(ToolCall.of("dumpe2fs", "-o", f"superblock={sb}", "-o",
                                     f"blocksize={bs}", "-h", dev, timeout_s=120,
                                     purpose="look for an ext backup superblock"))
        if res.returncode == 0 and "Block size:" in res.stdout:
            return bs, sb
    return None


def locate_unmounted(case: Case, image: Path, ranges: list[tuple[int, int]],
                     select: str | None = None) -> LocateResult:
    runner = SubprocessRunner(case)
    with mounting.attached(image, case=case, purpose="locate (offline)") as info:
        try:
            cand = mounting.pick_candidate(runner, info, select)
            if cand.segments:
                raise ToolFailedError(f"{image}: {cand.where} is made of several segments; "
                                      "offline block mapping needs it mounted")
            node, fsinfo, start = cand.node, cand.info, cand.start
        except EvidenceError:
            node, fsinfo, start = info["device"], {}, 0
        fstype = fsinfo.get("TYPE", "")
        backup = None
        if fstype == "xfs":
            hits = _xfs(runner, node, ranges, start)
            method = "xfs_db"
        elif fstype in {"ext2", "ext3", "ext4"}:
            hits = _ext(runner, node, ranges, start)
            method = "debugfs"
        elif not fstype and (backup := _ext_backup(runner, node)) is not None:
            hits = _ext(runner, node, ranges, start, backup=backup)
            method = f"debugfs (backup superblock {backup[1]}, block size {backup[0]})"
            fstype = "ext (primary superblock unreadable)"
        else:
            raise ToolFailedError(f"{image}: cannot map blocks of a {fstype or 'unknown'} "
                                  "filesystem without mounting it")
        for r in hits:
            r.files = _merge(r.files)
        how = "unavailable (not mounted; XFS files are not reconstructed offline)"
        if method.startswith("debugfs"):
            how = _ext_tensors(case, runner, node, hits, backup)
    return LocateResult(ranges=hits, method=method, partition_start=start, fstype=fstype,
                        tensor_map=how, notes=[] if how.startswith("probe_paths") else
                        [f"tensor map: {how}"])


def _ext_tensors(case: Case, runner: SubprocessRunner, dev: str, hits: list[RangeHits],
                 backup: tuple[int, int] | None) -> str:
    """Rebuild each hit file from its extents (read-only reads of the device, written into the
    case's work dir; unreadable bytes are zeros as in the image) and run the tensor map on it."""
    from ckptrescue.storage.locate import tensor_names

    opts = ["-c"] + (["-s", str(backup[1]), "-b", str(backup[0])] if backup else [])
    bs = backup[0] if backup else _ext_block_size(runner, dev)
    inodes = {h.path: h.inode for r in hits for h in r.files if h.inode is not None}
    if not inodes:
        return "no files hit"
    work = case.work_dir / "offline-files"
    work.mkdir(exist_ok=True)
    copies: dict[str, Path] = {}
    for path, ino in sorted(inodes.items()):
        stat_text = _run(runner, ["debugfs", *opts, "-R", f"stat <{ino}>", dev], "inode size")
        size = dbg.parse_stat_size(stat_text)
        exts = dbg.parse_extents(_run(runner, ["debugfs", *opts, "-R", f"ex <{ino}>", dev],
                                      "extents"))
        if size is None or not exts:
            continue
        out = work / f"{ino}-{Path(path).name}"
        with open(dev, "rb", buffering=0) as src, open(out, "wb") as dst:
            dst.truncate(size)
            for e in exts:
                if "Uninit" in e.flags:
                    continue  # unwritten extent: reads as zeros
                src.seek(e.physical * bs)
                dst.seek(e.logical * bs)
                left = min(e.length * bs, max(0, size - e.logical * bs))
                while left > 0:
                    block = src.read(min(left, 1 << 20))
                    if not block:
                        break
                    dst.write(block)
                    left -= len(block)
        copies[path] = out
    case.log("locate.offline_copies", {p: str(c) for p, c in copies.items()})
    return tensor_names(case, work, hits, resolve=copies.get)


def _ext_block_size(runner: SubprocessRunner, dev: str) -> int:
    for line in _run(runner, ["dumpe2fs", "-h", dev], "ext superblock").splitlines():
        if line.startswith("Block size:"):
            return int(line.split(":")[1])
    return 4096


def _xfs(runner: SubprocessRunner, dev: str, ranges: list[tuple[int, int]],
         start: int) -> list[RangeHits]:
    sb = xfs_db.parse_print(_run(runner, ["xfs_db", "-r", "-c", "sb 0", "-c", "print", dev],
                                 "xfs superblock"))
    bs = xfs_db.as_int(sb.get("blocksize")) or 4096
    pieces = _blocks(ranges, start, bs)
    out = [RangeHits(s, e) for s, e in ranges]
    if not pieces:
        return out
    conv = ["xfs_db", "-r"]
    for _i, lo, _hi in pieces:
        conv += ["-c", f"convert daddr {lo // 512} fsblock"]
    fsblocks = xfs_db.parse_convert(_run(runner, [*conv, dev], "daddr -> fsblock"))
    use = ["xfs_db", "-r", "-c", "blockget -n"]
    for fsb in fsblocks:
        use += ["-c", f"fsblock {fsb}", "-c", "blockuse -n"]
    owners = {u.fsblock: u for u in xfs_db.parse_blockuse(_run(runner, [*use, dev],
                                                                "block owners"))}
    inodes = sorted({u.inode for u in owners.values() if u.inode is not None and u.type == "data"})
    bmaps: dict[int, list[xfs_db.BmapExtent]] = {}
    if inodes:
        bm = ["xfs_db", "-r"]
        for ino in inodes:
            bm += ["-c", f"echo @@{ino}", "-c", f"inode {ino}", "-c", "bmap"]
        for key, text in xfs_db.split_echo_sections(_run(runner, [*bm, dev], "bmap")).items():
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


def _ext(runner: SubprocessRunner, dev: str, ranges: list[tuple[int, int]], start: int, *,
         backup: tuple[int, int] | None = None) -> list[RangeHits]:
    # -c (catastrophic mode): do not read the bitmaps, which may sit on the bad sectors
    opts = ["-c"] + (["-s", str(backup[1]), "-b", str(backup[0])] if backup else [])
    if backup:
        bs = backup[0]
    else:
        head = _run(runner, ["dumpe2fs", "-h", dev], "ext superblock")
        bs = 4096
        for line in head.splitlines():
            if line.startswith("Block size:"):
                bs = int(line.split(":")[1])
    pieces = _blocks(ranges, start, bs)
    out = [RangeHits(s, e) for s, e in ranges]
    if not pieces:
        return out
    blocks = sorted({lo // bs for _i, lo, _hi in pieces})
    owner = dbg.parse_icheck(_run(runner, ["debugfs", *opts, "-R", "icheck " + " ".join(
        map(str, blocks)), dev], "block -> inode"))
    inodes = sorted({i for i in owner.values() if i is not None})
    names = dbg.parse_ncheck(_run(runner, ["debugfs", *opts, "-R", "ncheck " + " ".join(
        map(str, inodes)), dev], "inode -> path")) if inodes else {}
    exts = {ino: dbg.parse_extents(_run(runner, ["debugfs", *opts, "-R", f"ex <{ino}>", dev],
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
