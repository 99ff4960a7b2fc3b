"""``locate`` on a ZFS member: ZFS has no FIEMAP, so ZFS itself names what lies at bad bytes.

The pool is imported read-only (:func:`mounting.mount`); every regular file of every mounted
dataset is read once (nothing is written). On the rescued image the unreadable sectors are zeros,
so each record stored there fails its checksum: the read returns EIO, and ZFS posts an
``ereport.fs.zfs.checksum`` whose ``zio_offset``/``zio_size`` are the failed I/O's bytes on the
member device (the 4 MiB label area already included) and whose ``zio_objset``/``zio_object``/
``zio_blkid`` name the dataset, the file (its inode number) and its block. A mapfile range that
holds such an I/O maps to that file at ``blkid x block size``; the probe engine names the
tensors there. Ranges where no read failed hold no file data that was read (free space or
metadata). ZFS rate-limits checksum events per vdev (``zfs_checksum_events_per_second``) and
suppresses one that repeats a recent event for the same block, so every event of this pool (by
GUID) in the event log is used, not only those of this read; files that failed to read without
an event are listed in the notes.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.storage import walk
from ckptrescue.storage.parsers import zpool_events

if TYPE_CHECKING:
    from ckptrescue.record.case import Case
    from ckptrescue.storage.locate import LocateResult

CHECKSUM_CLASSES = ("ereport.fs.zfs.checksum", "ereport.fs.zfs.io")


def _events(runner: SubprocessRunner, guid: str) -> list[zpool_events.ZEvent]:
    res = runner.run(ToolCall.of("zpool", "events", "-v", timeout_s=300, purpose="zfs events"))
    return [e for e in zpool_events.parse(res.stdout)
            if e.cls.startswith(CHECKSUM_CLASSES) and str(e.get("pool_guid", "")) == guid]


def _objsets(runner: SubprocessRunner, pool: str) -> dict[int, str]:
    """objset id -> dataset name."""
    res = runner.run(ToolCall.of("zfs", "get", "-H", "-p", "-o", "name,value", "objsetid", "-r",
                                 pool, timeout_s=120, purpose="dataset objset ids"))
    out: dict[int, str] = {}
    for line in res.stdout.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().isdigit():
            out[int(value)] = name
    return out


def read_all(roots: list[Path]) -> tuple[dict[tuple[int, int], Path], list[tuple[Path, int, int]]]:
    """Read every regular file under ``roots`` (one filesystem each); returns ``{(st_dev, ino):
    path}`` and the ``(path, offset, length)`` blocks that failed with EIO."""
    inodes: dict[tuple[int, int], Path] = {}
    failed: list[tuple[Path, int, int]] = []
    for root in roots:
        for p, st in walk.regular_files(root):
            inodes[(st.st_dev, st.st_ino)] = p
            unit = max(st.st_blksize, 4096)
            fd = os.open(p, os.O_RDONLY)
            try:
                for off in range(0, st.st_size, unit):
                    try:
                        os.pread(fd, unit, off)
                    except OSError as exc:
                        if exc.errno != errno.EIO:
                            raise
                        failed.append((p, off, min(unit, st.st_size - off)))
            finally:
                os.close(fd)
    return inodes, failed


def locate_zfs(case: Case, image: str | Path, ranges: list[tuple[int, int]],
               member_start: int = 0, select: str | None = None,
               runner: SubprocessRunner | None = None) -> LocateResult:
    from ckptrescue.storage import locate as loc
    from ckptrescue.storage import mounting

    where = Path(tempfile.mkdtemp(prefix="locate-zfs-", dir=case.work_dir))
    try:
        runner = runner or SubprocessRunner(case)
        res = mounting.mount(image, where, case=case, select=select, runner=runner)
    except BaseException:
        where.rmdir()
        raise
    try:
        pool, guid = str(res.zfs_pool), str(res.uuid)
        roots = [Path(d["mountpoint"]) for d in res.datasets if d.get("mounted")]
        inodes, failed = read_all(roots)
        # all of this pool's events, not only those of this read: ZFS suppresses a checksum
        # ereport that repeats a recent one (same vdev and block), e.g. when locate runs twice
        events = _events(runner, guid)
        objsets = _objsets(runner, pool)
        mount_of = {d["dataset"]: Path(d["mountpoint"]) for d in res.datasets if d.get("mounted")}
        base = where / pool
        out = loc.LocateResult(ranges=[loc.RangeHits(s, e) for s, e in ranges],
                               method="zfs (read every file; checksum events)",
                               partition_start=member_start, fstype="zfs",
                               tensor_map="no files hit")
        tied: set[Path] = set()
        for ev in events:
            dev_range = ev.device_range()
            obj, objset, blkid = ev.get("zio_object"), ev.get("zio_objset"), ev.get("zio_blkid")
            if dev_range is None or not isinstance(obj, int) or ev.get("zio_level", 0) != 0:
                continue
            a, b = dev_range[0] + member_start, dev_range[1] + member_start
            mp = mount_of.get(objsets.get(objset, ""))
            path = inodes.get((mp.stat().st_dev, obj)) if mp is not None else None
            if path is None or not isinstance(blkid, int):
                continue
            size = path.stat().st_size
            bs = max(path.stat().st_blksize, 512)
            f_off = blkid * bs
            length = max(0, min(bs, size - f_off))
            for r in out.ranges:
                if r.start < b and a < r.end:
                    rel = str(path.relative_to(base)) if base in path.parents else str(path)
                    if not any(h.path == rel and h.file_offset == f_off for h in r.files):
                        r.files.append(loc.FileHit(rel, f_off, length))
                    tied.add(path)
        out.tensor_map = loc.tensor_names(case, base, out.ranges)
        untied = sorted({str(p) for p, _o, _n in failed if p not in tied})
        if untied:
            out.notes.append("files that failed to read but whose checksum events are missing "
                             "(rate-limited?) or lie outside the mapfile's ranges: "
                             + ", ".join(untied[:20]))
        out.notes.append(f"read {len(inodes)} file(s) of {len(roots)} dataset(s); "
                         f"{len(events)} checksum/io event(s) of this pool")
        case.log("locate.zfs", {"pool": pool, "files": len(inodes), "failed_blocks":
                                [[str(p), o, n] for p, o, n in failed[:500]],
                                "events": len(events)})
        return out
    finally:
        mounting.umount(where, case=case, runner=runner)
        where.rmdir()

