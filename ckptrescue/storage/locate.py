"""``locate``: unreadable byte ranges of a ddrescue mapfile -> files -> tensors.

1. Ranges: every block of the mapfile that is not ``+`` (bad, unscraped, untried), as device bytes.
2. The image is mounted read-only without log replay (``mounting.mount``); the partition start
   (from sysfs) is subtracted, so ranges become filesystem byte offsets.
3. Every regular file of the mount (one filesystem, no symlinks followed) is mapped with
   FS_IOC_FIEMAP; each range intersecting an extent gives ``(path, file_offset, length)``.
   Shared (reflinked) extents are reported for every owner; extents without a physical address
   (inline, delalloc) are skipped.
4. Files that were hit are probed with ``ckptrescue.checkpoints.probes.checkpoints.probe_paths``; tensors
   whose ``[offset, offset+length)`` in that file intersect a hit are named.
5. When the image does not mount, the filesystem maps blocks with its own tools
   (``locate_offline``: XFS ``xfs_db -r``, ext2/3/4 ``debugfs``).
6. A filesystem without FIEMAP locates on the image by its own means (the registry's
   ``locate_image``: a ZFS member is imported and read, ``locate_zfs``).
"""

from __future__ import annotations

import bisect
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.errors import EvidenceError, ToolFailedError, ToolMissingError, UsageError
from ckptrescue.model import Finding, Severity
from ckptrescue.storage import fiemap, filesystem, mounting, walk
from ckptrescue.storage.hits import FileHit, LocateResult, RangeHits, merge
from ckptrescue.storage.parsers import ddrescue_mapfile

__all__ = ["FileHit", "LocateResult", "RangeHits", "locate", "map_files", "tensor_names"]
_merge = merge  # compatibility

if TYPE_CHECKING:
    from ckptrescue.effects.runner import SubprocessRunner
    from ckptrescue.record.case import Case


def map_files(root: Path, ranges: list[tuple[int, int]], *, offset: int = 0,
              size: int | None = None,
              segments: list[tuple[int, int, int]] | None = None) -> list[RangeHits]:
    """FIEMAP every regular file under the mounted ``root``.

    Device byte ranges become filesystem byte ranges through ``segments`` — ``(fs_offset,
    length, device_offset)`` pieces, e.g. the extents of an LVM logical volume — or, by default,
    one piece: the filesystem starts at ``offset`` (the partition start) and spans ``size``.
    Ranges outside every piece map to nothing here."""
    out = [RangeHits(s, e) for s, e in ranges]
    segs = segments or [(0, size if size is not None else 1 << 62, offset)]
    pieces: list[tuple[int, int, int]] = []  # (fs start, fs end, index of the device range)
    for i, (s, e) in enumerate(ranges):
        for fs_off, length, dev_off in segs:
            lo, hi = max(s, dev_off), min(e, dev_off + length)
            if lo < hi:
                pieces.append((lo - dev_off + fs_off, hi - dev_off + fs_off, i))
    pieces.sort()
    ends = [p[1] for p in pieces]  # pieces do not overlap: ends sorted too
    for full, _st in walk.regular_files(root):
        try:
            exts = fiemap.extents(full)
        except OSError:
            continue
        rel = str(full.relative_to(root))
        for ext in exts:
            if not ext.has_physical:
                continue
            # first piece ending after the extent's start; walk while pieces start before
            k = bisect.bisect_right(ends, ext.physical)
            while k < len(pieces) and pieces[k][0] < ext.physical + ext.length:
                s, e, i = pieces[k]
                k += 1
                for file_off, length, hit in fiemap.overlaps([ext], s, e):
                    out[i].files.append(FileHit(rel, file_off, length,
                                                shared=bool(hit.flags & fiemap.SHARED),
                                                unwritten=bool(hit.flags & fiemap.UNWRITTEN)))
    for r in out:
        r.files = merge(r.files)
    return out


def tensor_names(case: Case | None, root: Path, ranges: list[RangeHits], *,
                 resolve: Callable[[str], Path | None] | None = None) -> str:
    """Fill ``FileHit.tensors`` from the probe engine's tensor map; returns how it went.

    ``resolve`` maps a hit's path to a readable file (default ``root / path``; the offline
    path hands reconstructed copies); None skips that file."""
    where = resolve or (lambda rel: root / rel)
    files = {p: where(p) for p in sorted({h.path for r in ranges for h in r.files})}
    files = {p: f for p, f in files.items() if f is not None}
    if not files:
        return "no files hit"
    try:
        from ckptrescue.checkpoints.probes.checkpoints import probe_paths
    except ImportError:
        return "unavailable (ckptrescue.checkpoints.probes.checkpoints.probe_paths is not installed)"
    reports = []
    failed = []
    for p, f in files.items():  # one at a time: a failure must not lose the other answers
        try:
            reports.extend(probe_paths([f], case=case))
        except Exception as exc:
            failed.append(f"{p}: {type(exc).__name__}: {exc}")
    by_file: dict[str, list[Any]] = {}
    for rep in reports:
        for t in rep.tensors:
            if t.file is None or t.offset is None or t.length is None:
                continue
            by_file.setdefault(os.path.realpath(t.file), []).append(t)
    for r in ranges:
        for h in r.files:
            lo, hi = h.file_offset, h.file_offset + h.length
            f = files.get(h.path)
            if f is None or h.file_offset < 0:
                continue
            names = [t.name for t in by_file.get(os.path.realpath(f), [])
                     if t.offset < hi and lo < t.offset + t.length]
            h.tensors = sorted(set(names))
    return "probe_paths" + (f" (failed for {'; '.join(failed)})" if failed else "")


def locate(mapfile: str | Path, image: str | Path, *, case: Case,
           mountpoint: str | Path | None = None, partition_start: int = 0,
           runner: SubprocessRunner | None = None) -> LocateResult:
    """Map every unreadable range of ``mapfile`` in ``image`` (a file or device) to files and
    tensors. With ``mountpoint`` an existing read-only mount of the same filesystem is used."""
    mpath = Path(mapfile)
    if not mpath.is_file():
        raise EvidenceError(f"{mpath}: no such mapfile")
    mp = ddrescue_mapfile.parse(mpath.read_text(), name=str(mpath))
    ranges = mp.unreadable_ranges()
    case.log("locate.started", {"mapfile": str(mpath), "image": str(image),
                                "ranges": [list(r) for r in ranges]})
    if mountpoint is not None:
        from ckptrescue.storage import writeblock

        writeblock.protect_mount_source(mountpoint, case, purpose="locate (mounted)")
        fstype = None
        state = mounting.mount_state(case, mountpoint)
        segments = None
        if state is not None:  # a kit mount: it knows the partition start and type
            partition_start = partition_start or int(state.get("partition_start", 0))
            fstype = state.get("fstype")
            segments = state.get("segments")
        result = _locate_mounted(case, Path(mountpoint), ranges, partition_start, fstype,
                                 segments=segments)
    elif not ranges:
        result = LocateResult(ranges=[], notes=["the mapfile has no unreadable ranges"])
    else:
        cands, blind = _filesystems_of(case, image, runner)
        own = (filesystem.get(cands[0].info.get("TYPE")).locate_image(
            case, image, ranges, member_start=cands[0].start, runner=runner)
            if len(cands) == 1 else None)
        if own is not None:  # no FIEMAP: the filesystem locates by its own means (ZFS)
            result = own
        elif len(cands) > 1:
            result = _locate_each(case, image, ranges, cands, runner)
        else:
            result = _locate_one(case, image, ranges, runner)
        result.unmapped += blind
    result.findings = _findings(result, str(image))
    size = _size_of(image)
    if size is not None and mp.domain_end > size:
        beyond = [r for r in ranges if r[1] > size]
        note = (f"the mapfile covers {mp.domain_end} bytes but {image} has {size}: a mapfile of "
                f"another (larger) device or image? {len(beyond)} unreadable range(s) lie past "
                "its end and map to nothing here")
        result.notes.append(note)
        result.findings.append(Finding("LC004", Severity.WARNING, note, evidence=str(image),
                                       source="locate",
                                       details={"mapfile_end": mp.domain_end, "size": size}))
    result.findings_here()  # the engine records the findings, then the summary
    result.record("locate.finished", result.details())
    return result


def _locate_one(case: Case, image: str | Path, ranges: list[tuple[int, int]],
                runner: SubprocessRunner | None) -> LocateResult:
    where = Path(tempfile.mkdtemp(prefix="locate-", dir=case.work_dir))
    try:
        mres = mounting.mount(image, where, case=case, runner=runner)
    except (ToolFailedError, EvidenceError) as exc:
        where.rmdir()
        from ckptrescue.storage import locate_offline

        result = locate_offline.locate_unmounted(case, Path(image), ranges, runner=runner)
        result.notes.append(f"not mountable ({exc.message}); used {result.method}")
        return result
    try:
        return _locate_mounted(case, where, ranges, mres.partition_start, mres.fstype,
                               segments=mres.segments)
    finally:
        mounting.umount(where, case=case, runner=runner)
        where.rmdir()


def _filesystems_of(case: Case, image: str | Path, runner: SubprocessRunner | None
                    ) -> tuple[list[mounting.FsCandidate],
                                                           list[tuple[int, int, str]]]:
    """The filesystems on ``image`` (partitions, LVM logical volumes), and the device ranges of
    logical volumes that cannot be mapped (no filesystem, hidden, raid/thin/...)."""
    from ckptrescue.effects.runner import SubprocessRunner

    runner = runner or SubprocessRunner(case)
    with mounting.attached(image, case=case, purpose="locate", runner=runner) as info:
        cands = mounting.filesystems(runner, info)
        blind = [(int(a), int(b), f"LV {u['lv']}: {u['reason']}")
                 for u in info.get("unmapped_lvs", []) for a, b in u.get("pieces", [])]
        return cands, blind


def _locate_each(case: Case, image: str | Path, ranges: list[tuple[int, int]],
                 cands: list[mounting.FsCandidate],
                 runner: SubprocessRunner | None) -> LocateResult:
    """Several filesystems on the image: each one that the ranges touch is mounted in turn."""
    out = LocateResult(ranges=[RangeHits(s, e) for s, e in ranges], method="fiemap",
                       tensor_map="no files hit")
    for c in cands:
        pieces = c.segments or [(0, c.size if c.size is not None else 1 << 62, c.start)]
        if not any(e > d and s < d + n for s, e in ranges for _f, n, d in pieces):
            continue
        fs = filesystem.get(c.info.get("TYPE"))
        try:
            own = fs.locate_image(case, image, ranges, member_start=c.start, select=c.where,
                                  runner=runner)
        except (ToolFailedError, EvidenceError, UsageError, ToolMissingError) as exc:
            why = f"{fs.title} member, not importable here ({exc.message})"
            out.notes.append(f"{c.where}: {why}")
            out.unmapped += [(d, d + n, f"{c.where}: {why}") for _f, n, d in pieces]
            continue
        if own is not None:  # no FIEMAP: located by its own means (ZFS)
            _absorb(out, own, c.where, list(range(len(ranges))))
            continue
        where = Path(tempfile.mkdtemp(prefix="locate-", dir=case.work_dir))
        try:
            mres = mounting.mount(image, where, case=case, select=c.where, runner=runner)
        except (ToolFailedError, EvidenceError, UsageError) as exc:
            where.rmdir()
            if _offline_into(out, case, image, ranges, c, exc.message, runner):
                continue
            out.notes.append(f"{c.where} ({c.fstype}) not mountable: {exc.message}; "
                             "its ranges are not mapped")
            out.unmapped += [(d, d + n, f"{c.where}: not mountable ({exc.message})")
                             for _f, n, d in pieces]
            continue
        try:
            part = _locate_mounted(case, where, ranges, mres.partition_start, mres.fstype,
                                   c.size, segments=mres.segments)
        finally:
            mounting.umount(where, case=case, runner=runner)
            where.rmdir()
        _absorb(out, part, c.where, list(range(len(ranges))))
        out.notes.append(f"{c.where} ({mres.fstype}) starts at byte {c.start}")
    return out


def _offline_into(out: LocateResult, case: Case, image: str | Path,
                  ranges: list[tuple[int, int]], c: mounting.FsCandidate, why: str,
                  runner: SubprocessRunner | None = None) -> bool:
    """An unmountable filesystem among several: map the ranges inside it with xfs_db/debugfs
    (``locate_offline``) into ``out``; False when that is not possible either."""
    if c.segments or c.size is None:
        return False
    mine = [(i, max(s, c.start), min(e, c.start + c.size)) for i, (s, e) in enumerate(ranges)
            if s < c.start + c.size and c.start < e]
    if not mine:
        return True
    from ckptrescue.storage import locate_offline

    try:
        off = locate_offline.locate_unmounted(case, Path(image), [(a, b) for _i, a, b in mine],
                                              select=c.where, runner=runner)
    except Exception as exc:  # noqa: BLE001 - the fallback must not abort the other filesystems
        case.log("locate.offline_failed", {"where": c.where, "error": f"{type(exc).__name__}: "
                                                                      f"{exc}"})
        return False
    out.notes.append(f"{c.where} ({c.fstype}) not mountable ({why}); used {off.method}")
    _absorb(out, off, c.where, [i for i, _a, _b in mine])
    return True


def _absorb(out: LocateResult, part: LocateResult, where: str, index: list[int]) -> None:
    """Merge one filesystem's answer into ``out``: ``part.ranges[k]`` is ``out.ranges[index[k]]``."""
    for k, hits in zip(index, part.ranges, strict=True):
        out.ranges[k].files += hits.files
    if any(r.files for r in part.ranges) and not out.tensor_map.startswith("probe_paths"):
        out.tensor_map = part.tensor_map
    out.notes += [f"{where}: {n}" for n in part.notes]


def _size_of(target: str | Path) -> int | None:
    """Byte size of an image file or a block device (opened read-only), or None."""
    try:
        fd = os.open(str(target), os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    except OSError:
        return None
    finally:
        os.close(fd)


def _locate_mounted(case: Case, root: Path, ranges: list[tuple[int, int]], start: int,
                    fstype: str | None, size: int | None = None,
                    segments: list[list[int]] | None = None) -> LocateResult:
    refusal = filesystem.get(fstype).mounted_locate_refusal()
    if refusal:  # no FIEMAP on such a mount: locate the image instead (ZFS imports and reads)
        raise UsageError(refusal)
    segs = [(int(a), int(b), int(c)) for a, b, c in segments] if segments else None
    hits = map_files(root, ranges, offset=start, size=size, segments=segs)
    how = tensor_names(case, root, hits)
    res = LocateResult(ranges=hits, method="fiemap", partition_start=start, fstype=fstype,
                       tensor_map=how)
    if how != "probe_paths":
        res.notes.append(f"tensor map: {how}")
    return res


def _findings(result: LocateResult, image: str) -> list[Finding]:
    out: list[Finding] = []
    for r in result.ranges:
        blind = [why for s, e, why in result.unmapped if s < r.end and r.start < e]
        if blind:  # also when part of the range did map to files
            out.append(Finding("LC005", Severity.WARNING,
                               f"unreadable bytes [{r.start:#x}, {r.end:#x}) lie (in part) in a "
                               f"filesystem or volume that was not mapped: {'; '.join(blind)}",
                               evidence=image, offset=r.start, length=r.end - r.start,
                               source="locate"))
            if not r.files:
                continue
        if not r.files:
            out.append(Finding("LC002", Severity.WARNING,
                               f"unreadable bytes [{r.start:#x}, {r.end:#x}) hold no regular-file "
                               "data (filesystem metadata or free space)", evidence=image,
                               offset=r.start, length=r.end - r.start, source="locate"))
        for h in r.files:
            code = "LC003" if h.shared else "LC001"
            what = f"tensors {', '.join(h.tensors)}" if h.tensors else "no tensor named"
            if h.shared:
                what += "; shared extent, other owners are listed too"
            out.append(Finding(
                code, Severity.ERROR,
                f"{h.path}: bytes [{h.file_offset}, {h.file_offset + h.length}) unreadable "
                f"({what})", evidence=h.path, offset=h.file_offset, length=h.length,
                source="locate", tensors=tuple(h.tensors),
                details={"device_range": [r.start, r.end], "shared": h.shared,
                         "unwritten": h.unwritten, "image": image}))
    return out
