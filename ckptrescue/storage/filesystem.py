"""The filesystem registry: what the storage verbs know about each filesystem, in one place.

Each module in ``ckptrescue/storage/filesystems/`` whose name does not start with ``_`` may define
``FILESYSTEMS = [Class, ...]``; :func:`registry` imports them lazily (like
``ckptrescue.checkpoints.base.formats()``). A class derives from :class:`Filesystem` and overrides the
hooks it has something to say in; the defaults are what the verbs do for a filesystem they know
nothing about (mount ``ro``, no checks, no offline mapping). See ``filesystems/_example.py``.

The verbs call through here: ``mounting`` (:meth:`Filesystem.mount_options`,
:meth:`~Filesystem.clone_options`, :meth:`~Filesystem.mount`, :meth:`~Filesystem.unmount`),
``fsinspect`` (:meth:`~Filesystem.inspect`, :attr:`~Filesystem.sysfs_dir`,
:meth:`~Filesystem.mounted_findings`), ``locate`` (:meth:`~Filesystem.locate_image`,
:meth:`~Filesystem.mounted_locate_refusal`), ``locate_offline``
(:meth:`~Filesystem.locate_offline`, :meth:`~Filesystem.locate_unidentified`), ``triage``
(:attr:`~Filesystem.kernel_patterns`) and ``copy`` (:meth:`~Filesystem.copy_sources`).

Volume managers (LVM) are not filesystems: they hold filesystems. They are looked up by blkid
TYPE in ``candidates.volume_manager`` (see ``storage/lvm.py``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ckptrescue.effects.runner import SubprocessRunner, ToolCall, ToolResult
from ckptrescue.model import Finding, Severity
from ckptrescue.plugins import plugin_modules

if TYPE_CHECKING:
    from ckptrescue.record.case import Case
    from ckptrescue.storage.hits import LocateResult, RangeHits
    from ckptrescue.storage.mount_state import MountResult

# nothing on the evidence runs, and no set-uid bit or device node from it counts
EVIDENCE_MOUNT_OPTIONS = ",nosuid,nodev,noexec"

Facts = tuple[dict[str, Any], list[Finding]]


def run_tool(runner: SubprocessRunner, *argv: str, purpose: str,
             timeout: float = 600) -> ToolResult:
    """One read-only tool run through the guarded runner (audited like every other)."""
    return runner.run(ToolCall(argv=tuple(argv), timeout_s=timeout, purpose=purpose))


def inspect_finding(code: str, sev: Severity, title: str, ev: str, **details: Any) -> Finding:
    """A finding of ``fs inspect``."""
    return Finding(code, sev, title, evidence=ev, source="fs inspect", details=details)


@dataclass
class MountRequest:
    """Everything ``mounting.mount`` knows when a filesystem mounts itself (:meth:`Filesystem.mount`)."""

    runner: SubprocessRunner
    case: Case
    info: dict[str, Any]  # what ``loops.attach`` attached
    node: str  # the block device node holding the filesystem
    fsinfo: dict[str, str]  # blkid -p
    start: int  # its byte offset in the target
    target: str | Path
    mountpoint: Path
    state: Path  # where the mount record goes
    members: list[str] = field(default_factory=list)  # other devices of a pool


@dataclass
class OfflineMap:
    """What :meth:`Filesystem.locate_offline` found without mounting."""

    hits: list[RangeHits]  # merged (``hits.merge``)
    method: str  # "xfs_db", "debugfs", ...
    tensor_map: str  # "probe_paths" when tensors were named, else why not
    fstype: str | None = None  # overrides blkid's TYPE in the result when set


@dataclass
class CopySources:
    """What ``copy`` reads when a mount point is not one plain filesystem."""

    media: list[str]  # the physical media (checked against the destination)
    mounted: list[Path]  # the filesystems to copy
    left_out: list[str]  # what is not mounted and so not copied (CP005)
    one_filesystem: bool  # rsync -x; else every filesystem in ``mounted`` (by st_dev)
    nothing_mounted: str = ""  # the usage error when ``mounted`` is empty
    nothing_hint: str = ""


class Filesystem:
    """Base class and the defaults for a filesystem the kit knows nothing special about."""

    name: ClassVar[str] = "unknown"
    title: ClassVar[str] = "unknown"  # for messages: "XFS", "ext2/3/4", "ZFS"
    types: ClassVar[tuple[str, ...]] = ()  # blkid TYPE names and ``mount -t`` names it owns
    order: ClassVar[int] = 100  # registry order (kernel log patterns are tried in this order)
    read_only: ClassVar[str] = "ro"  # mount options that neither write nor replay a journal
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = ()  # (kind, pattern)
    sysfs_dir: ClassVar[str | None] = None  # /sys/fs/<dir>/<dev> while mounted
    sysfs_attrs: ClassVar[tuple[str, ...]] = ()  # read-only attributes read there

    @classmethod
    def mount_options(cls, fstype: str, kernel: str | None = None) -> str:
        """The full ``-o`` of a read-only evidence mount of ``fstype`` on this kernel."""
        return cls.read_only + EVIDENCE_MOUNT_OPTIONS

    @classmethod
    def clone_options(cls, runner: SubprocessRunner, fsinfo: dict[str, str],
                      target: str | Path) -> tuple[str, list[Finding]]:
        """Extra options (",nouuid") and findings when the evidence clones a mounted filesystem."""
        return "", []

    @classmethod
    def mount(cls, request: MountRequest) -> MountResult | None:
        """Mount by other means than ``mount -t`` (a pool import); None: the kernel mount."""
        return None

    @classmethod
    def unmount(cls, runner: SubprocessRunner, record: dict[str, Any]) -> bool:
        """Undo :meth:`mount` for a recorded mount; False: the plain ``umount``."""
        return False

    @classmethod
    def inspect(cls, runner: SubprocessRunner, node: str, fsinfo: dict[str, str], ev: str, *,
                case: Case | None, target: str) -> Facts | None:
        """(facts, findings) of ``fs inspect``; None: no filesystem-specific checks."""
        return None

    @classmethod
    def mounted_findings(cls, live: dict[str, Any], found: list[Finding],
                         ev: str) -> list[Finding]:
        """Findings from the live sysfs state of a mounted filesystem (``fsinspect.mounted_state``)
        not already among ``found``."""
        return []

    @classmethod
    def locate_offline(cls, case: Case, runner: SubprocessRunner, node: str,
                       ranges: list[tuple[int, int]], start: int) -> OfflineMap | None:
        """Map ranges to files with the filesystem's own tools (not mounted); None: cannot."""
        return None

    @classmethod
    def locate_unidentified(cls, case: Case, runner: SubprocessRunner, node: str,
                            ranges: list[tuple[int, int]], start: int) -> OfflineMap | None:
        """Like :meth:`locate_offline` when blkid found no filesystem at all (damaged primary
        superblock): try to recognise this filesystem anyway; None: not this one."""
        return None

    @classmethod
    def locate_image(cls, case: Case, image: str | Path, ranges: list[tuple[int, int]], *,
                     member_start: int, select: str | None = None,
                     runner: SubprocessRunner | None = None) -> LocateResult | None:
        """Locate on the image by the filesystem's own means (no FIEMAP); None: mount + FIEMAP."""
        return None

    @classmethod
    def mounted_locate_refusal(cls) -> str | None:
        """Why ``locate --mountpoint`` cannot work on a mount of this filesystem (no FIEMAP)."""
        return None

    @classmethod
    def copy_sources(cls, case: Case, src: Path) -> CopySources | None:
        """What to copy when ``src`` lies in a mount of this kind made by the case; None: not."""
        return None


@functools.cache
def registry() -> tuple[type[Filesystem], ...]:
    """Every registered filesystem, in ``order`` (lazy discovery)."""
    from ckptrescue.storage import filesystems as pkg

    found: list[type[Filesystem]] = [
        fs for module in plugin_modules(pkg) for fs in getattr(module, "FILESYSTEMS", [])]
    found.sort(key=lambda f: f.order)
    return tuple(found)


def find(fstype: str | None) -> type[Filesystem] | None:
    """The registered filesystem owning blkid TYPE / mount type ``fstype``, or None."""
    for fs in registry():
        if fstype in fs.types:
            return fs
    return None


def get(fstype: str | None) -> type[Filesystem]:
    """The registered filesystem for ``fstype``, else the defaults (:class:`Filesystem`)."""
    return find(fstype) or Filesystem


def ro_options(fstype: str, kernel: str | None = None) -> str:
    """The read-only, no-replay evidence mount options for ``fstype`` on this kernel."""
    return get(fstype).mount_options(fstype, kernel)


def kernel_patterns() -> list[tuple[str, re.Pattern[str]]]:
    """(kind, pattern) of every registered filesystem's kernel log messages, in registry order."""
    return [p for fs in registry() for p in fs.kernel_patterns]
