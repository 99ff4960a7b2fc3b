"""``locate`` when the image cannot be mounted: ask the filesystem tools directly (read-only).

The filesystem registry does the mapping (:meth:`Filesystem.locate_offline`): XFS with
``xfs_db -r`` (``filesystems/xfs.py``), ext2/3/4 with ``debugfs`` (``filesystems/ext.py``). When
blkid finds no filesystem at all, each registered filesystem may still recognise its own
(:meth:`Filesystem.locate_unidentified`: ext's backup superblocks). At most ``MAX_BLOCKS``
blocks are resolved per call; :func:`blocks` and :func:`run_text` are the mappers' helpers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import EvidenceError, ToolFailedError
from ckptrescue.storage import filesystem
from ckptrescue.storage.candidates import pick_candidate
from ckptrescue.storage.hits import LocateResult
from ckptrescue.storage.loops import attached

if TYPE_CHECKING:
    from ckptrescue.record.case import Case
    from ckptrescue.storage.filesystem import OfflineMap


MAX_BLOCKS = 4096


def blocks(ranges: list[tuple[int, int]], offset: int, bs: int) -> list[tuple[int, int, int]]:
    """(range index, fs byte start of the piece, piece end) per filesystem block touched."""
    out = []
    for i, (s, e) in enumerate(ranges):
        s, e = max(0, s - offset), max(0, e - offset)
        b = s - s % bs
        while b < e and len(out) < MAX_BLOCKS:
            out.append((i, max(b, s), min(b + bs, e)))
            b += bs
    return out


def run_text(runner: SubprocessRunner, argv: list[str], purpose: str) -> str:
    """stdout of a read-only tool run; a refusal, or a failure with no output, raises."""
    res = runner.run(ToolCall(argv=tuple(argv), timeout_s=600, purpose=purpose))
    if res.refused:
        raise ToolFailedError(f"{argv[0]} refused: {res.refused}")
    if res.returncode != 0 and not res.stdout:
        raise ToolFailedError(f"{argv[0]} failed: {res.stderr.strip()}")
    return res.stdout


def locate_unmounted(case: Case, image: Path, ranges: list[tuple[int, int]],
                     select: str | None = None, *, runner: SubprocessRunner | None = None) -> LocateResult:
    runner = runner or SubprocessRunner(case)
    with attached(image, case=case, purpose="locate (offline)", runner=runner) as info:
        try:
            cand = pick_candidate(runner, info, select)
            if cand.segments:
                raise ToolFailedError(f"{image}: {cand.where} is made of several segments; "
                                      "offline block mapping needs it mounted")
            node, fsinfo, start = cand.node, cand.info, cand.start
        except EvidenceError:
            node, fsinfo, start = info["device"], {}, 0
        fstype = fsinfo.get("TYPE", "")
        found: OfflineMap | None = None
        if fstype:
            found = filesystem.get(fstype).locate_offline(case, runner, node, ranges, start)
        else:  # no filesystem identified: one may still recognise itself (backup superblock)
            for fs in filesystem.registry():
                found = fs.locate_unidentified(case, runner, node, ranges, start)
                if found is not None:
                    break
        if found is None:
            raise ToolFailedError(f"{image}: cannot map blocks of a {fstype or 'unknown'} "
                                  "filesystem without mounting it")
    how = found.tensor_map
    return LocateResult(ranges=found.hits, method=found.method, partition_start=start,
                        fstype=found.fstype or fstype, tensor_map=how,
                        notes=[] if how.startswith("probe_paths") else [f"tensor map: {how}"])
