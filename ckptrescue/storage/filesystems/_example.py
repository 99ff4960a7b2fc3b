"""A documented example filesystem: copy this file to add a filesystem.

Modules in ``ckptrescue/storage/filesystems/`` whose name does not start with ``_`` are imported
by ``ckptrescue.storage.filesystem.registry()``; each may define ``FILESYSTEMS = [Class, ...]``.
``mount``/``umount``, ``fs inspect``, ``locate`` (online and offline), ``triage`` and ``copy``
find the new filesystem through the registry, by the blkid TYPE of what they attached
(``filesystem.get(fstype)``). This module starts with ``_`` so it is NOT registered.

The contract (see ``filesystem.Filesystem``; override only what differs from the defaults):

``name``, ``title`` (ClassVar[str])
    Registry key ("xfs") and the name used in messages ("XFS").
``types`` (ClassVar[tuple[str, ...]])
    The blkid ``TYPE`` names (``blkid -p -o export``) this module owns, and the ``mount -t``
    names if they differ (ZFS: ``zfs_member`` and ``zfs``). Each type belongs to one module.
``order`` (ClassVar[int], default 100)
    Registry order; kernel log patterns are tried in this order (first match classifies).
``read_only`` (ClassVar[str], default ``"ro"``) / ``mount_options(fstype, kernel=None)``
    The options of a read-only mount that neither writes nor replays a journal/log (XFS
    ``ro,norecovery``, ext3/4 ``ro,noload``); ``mount_options`` appends
    ``filesystem.EVIDENCE_MOUNT_OPTIONS`` (``,nosuid,nodev,noexec``) and may depend on the
    kernel (btrfs). The guard must accept the form: add the type to ``RO_MOUNT_TYPES`` in
    ``ckptrescue/guard/tools/mounting.py`` with the no-replay option it requires (the guard is
    another owner's: ask), or ``mount`` is refused.
``clone_options(runner, fsinfo, target) -> (extra, findings)``
    Extra options when the evidence clones a mounted filesystem (XFS ``,nouuid``, MT002).
``mount(request) -> MountResult | None`` / ``unmount(runner, record) -> bool``
    Only for a filesystem that is not mounted with ``mount -t`` (ZFS imports its pool).
``inspect(runner, node, fsinfo, ev, *, case, target) -> (facts, findings) | None``
    ``fs inspect``: read-only tool runs (``filesystem.run_tool``) and findings
    (``filesystem.inspect_finding``; codes in ``ckptrescue/codes/``). None: "no
    filesystem-specific checks".
``sysfs_dir``, ``sysfs_attrs``, ``mounted_findings(live, found, ev)``
    Read-only ``/sys/fs/<dir>/<dev>/<attr>`` of a mounted filesystem, and findings from them.
``locate_offline(case, runner, node, ranges, start) -> OfflineMap | None``
    Map unreadable device ranges to files with the filesystem's own tools when it does not mount
    (``locate_offline.blocks`` / ``run_text`` help; merge with ``hits.merge_all``).
    ``locate_unidentified`` does the same when blkid found nothing (a damaged superblock).
``locate_image(case, image, ranges, *, member_start, select) -> LocateResult | None``
    Only for a filesystem without FIEMAP (ZFS); then ``mounted_locate_refusal()`` says why
    ``locate --mountpoint`` cannot work.
``kernel_patterns`` (ClassVar[tuple[(kind, re.Pattern), ...]])
    Kernel log lines ``triage`` reports as this filesystem's errors (finding TR004).
``copy_sources(case, src) -> CopySources | None``
    Only when a mount of this kind spans several filesystems (a ZFS pool's datasets).

Every external command goes through the ``SubprocessRunner`` handed in, whose guard must know the
tool (``ckptrescue/guard/tools/``). Tests: ``tests/storage/test_filesystem_registry.py`` checks
the hooks and the coverage of the guard's mount types and blkid's TYPE names; add a test that
mounts/inspects a real image (``fixtures/storage.py``) and that the image hash is unchanged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

from ckptrescue.effects.runner import SubprocessRunner
from ckptrescue.model import Severity
from ckptrescue.storage.filesystem import Facts, Filesystem, inspect_finding, run_tool

if TYPE_CHECKING:
    from ckptrescue.record.case import Case


class ExampleFs(Filesystem):
    """A made-up journaling filesystem: ``exfs``; ``norecovery`` skips its journal replay."""

    name: ClassVar[str] = "example"
    title: ClassVar[str] = "ExFS"
    types: ClassVar[tuple[str, ...]] = ("exfs",)
    order: ClassVar[int] = 100
    read_only: ClassVar[str] = "ro,norecovery"
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (
        ("exfs", re.compile(r"EXFS \([^)]*\): .*(corrupt|journal error)", re.IGNORECASE)),)

    @classmethod
    def inspect(cls, runner: SubprocessRunner, node: str, fsinfo: dict[str, str], ev: str, *,
                case: Case | None, target: str) -> Facts | None:
        res = run_tool(runner, "exfs_info", "--read-only", node, purpose="exfs superblock")
        facts = {"exfs_info": res.stdout.strip()}
        findings = []
        if "journal: dirty" in res.stdout:
            findings.append(inspect_finding("XF001", Severity.ERROR, "ExFS journal is dirty: "
                                            "mount only with ro,norecovery", ev))
        return facts, findings


# FILESYSTEMS = [ExampleFs]   # <- a real filesystem module ends with this
