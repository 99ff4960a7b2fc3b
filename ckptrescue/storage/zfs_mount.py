"""``mount`` / ``umount`` of a ZFS member: the pool is imported read-only (:mod:`zfs_pool`)
from every member, each attached read-only like any evidence (:mod:`loops`), and exported again
by ``umount``. Reached through the filesystem registry (``filesystems/zfs.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import SubprocessRunner
from ckptrescue.errors import ToolFailedError, UsageError
from ckptrescue.model import Finding, Severity
from ckptrescue.storage.candidates import pick_candidate
from ckptrescue.storage.loops import attach
from ckptrescue.storage.mount_state import MountResult, record_state, release_or_keep

if TYPE_CHECKING:
    from ckptrescue.record.case import Case
    from ckptrescue.storage.filesystem import MountRequest


def attach_members(runner: SubprocessRunner, case: Case, paths: list[str], guid: str,
                    attached: list[dict[str, Any]]) -> list[str]:
    """Attach the pool's other members read-only (appending each to ``attached`` at once, so
    that a failure releases what was attached); returns their member nodes."""
    nodes = []
    for path in paths:
        m_info = attach(path, case=case, runner=runner)
        attached.append(m_info)
        cand = pick_candidate(runner, m_info)
        if cand.info.get("TYPE") != "zfs_member" or cand.info.get("UUID") != guid:
            raise UsageError(f"{path}: not a member of this pool (GUID {guid}): "
                             f"{cand.info.get('TYPE') or 'no filesystem'} "
                             f"{cand.info.get('UUID') or ''}".rstrip())
        nodes.append(cand.node)
    return nodes


def mount_zfs(request: MountRequest) -> MountResult:
    """Import the pool of a ZFS member read-only under ``mp`` (see :mod:`zfs_pool`)."""
    from ckptrescue.storage import zfs_pool

    runner, case, info, node = request.runner, request.case, request.info, request.node
    fsinfo, start, target, mp = request.fsinfo, request.start, request.target, request.mountpoint
    member_paths = request.members

    result = MountResult(mountpoint=str(mp), device=node, fstype="zfs",
                         options="readonly=on,cachefile=none,-N,altroot=" + str(mp),
                         target=str(target), loop_device=info["loop_device"],
                         backing_file=info["backing_file"], set_readonly=info["set_readonly"],
                         partition_start=start, uuid=fsinfo.get("UUID"),
                         extra_loops=info.get("extra_loops", []),
                         dm_devices=info.get("dm_devices", []))

    def record(pool: str) -> None:  # before anything else can fail: umount then exports it
        result.zfs_pool = pool
        record_state(case, mp, result.to_json())

    others: list[dict[str, Any]] = []
    result.members = others
    try:
        nodes = [node, *attach_members(runner, case, member_paths, fsinfo.get("UUID", ""),
                                        others)]
        images_only = all(i["loop_device"] is not None for i in [info, *others])
        imp = zfs_pool.import_readonly(runner, members=nodes, fsinfo=fsinfo,
                                       altroot=str(mp), images_only=images_only,
                                       evidence=str(target), on_imported=record)
    except BaseException:
        if result.zfs_pool:
            try:
                zfs_pool.export(runner, result.zfs_pool, result.uuid)
            except Exception as exc:  # the pool stays imported (read-only): keep its record
                case.log("storage.zfs_left_imported", {"pool": result.zfs_pool,
                                                       "error": str(exc)})
                raise ToolFailedError(
                    f"mount failed and pool {result.zfs_pool} could not be exported ({exc}); "
                    "it stays imported read-only",
                    hint=f"retry with `ckptrescue umount {mp} --case {case.root}`") from exc
            record_state(case, mp, None)
        release_or_keep(info, case, mp, others, runner=runner)
        raise
    result.datasets = imp.datasets
    mounted = [d["mountpoint"] for d in imp.datasets if d["mounted"]]
    result.findings = [*imp.findings, Finding(
        "MT001", Severity.INFO, f"{target}: ZFS pool {imp.ondisk_name} imported read-only "
        f"(readonly=on, cachefile=none) under {mp}; datasets mounted ro: "
        f"{', '.join(mounted) or 'none'}", evidence=str(target), source="mount")]
    record_state(case, mp, result.to_json())
    result.findings_here()  # the engine records the findings, then the mount
    result.record("storage.mounted", result.to_json())
    return result


def export_recorded(runner: SubprocessRunner, record: dict[str, Any]) -> bool:
    """``umount`` of a recorded pool import: export it (after checking its GUID); False when
    the record holds no pool."""
    if not record.get("zfs_pool"):
        return False
    from ckptrescue.storage import zfs_pool

    zfs_pool.export(runner, record["zfs_pool"], record.get("uuid"))
    return True
