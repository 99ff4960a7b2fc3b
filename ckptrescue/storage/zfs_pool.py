"""Read-only import and export of a ZFS pool held by evidence (``mount`` / ``umount``).

The member is already a read-only block device (:func:`mounting.attach`: a ``losetup
--read-only`` loop for an image, BLKROSET for a device). The pool is then imported with

    zpool import -o readonly=on -o cachefile=none -N -R MOUNTPOINT -d MEMBER... GUID [-t NAME]

* ``readonly=on`` — nothing is written: no txg sync, no label update, no ZIL replay;
* ``cachefile=none`` — the host's ``/etc/zfs/zpool.cache`` is not touched;
* ``-N`` — nothing is mounted by the import itself; the kit then mounts each filesystem dataset
  with ``zfs mount -o ro`` (below the altroot ``-R MOUNTPOINT``);
* by numeric GUID, with a temporary in-core name (``-t``) when a pool of that name is already
  imported on this host (a clone of the host's own pool).

A pool that was never exported (the machine died with it imported: "previously in use from
another system") needs ``-f``. The kit adds ``-f`` only when every member is an image file on a
read-only loop device it attached itself — nothing else can be using it — and says so in a
finding. ``umount`` exports the pool (the guard allows ``zpool export`` only for a pool this case
imported read-only) and detaches the loop devices.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import RefusedError, ToolFailedError, ToolMissingError
from ckptrescue.model import Finding, Severity

IN_USE_MARKERS = ("previously in use from another system", "use '-f'", "use -f")


@dataclass
class PoolImport:
    pool: str  # in-core name (what zpool/zfs commands use now)
    ondisk_name: str
    guid: str
    argv: list[str]
    forced: bool = False
    datasets: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


ZFS_FUSE_SOCKET = "/var/run/zfs/zfs_socket"  # zfs-fuse's daemon (zpool/zfs talk to it)


def implementation() -> tuple[str | None, str]:
    """Which ZFS this host runs: ("openzfs", ...) when the kernel module is loaded
    (``/dev/zfs``), ("zfs-fuse", ...) when zfs-fuse's daemon answers on its socket, else
    (None, why not). zfs-fuse is a real userspace ZFS (pool version 23) that can read labels,
    scan for pools, report status and properties, but has no read-only import (docs/storage.md).
    """
    if shutil.which("zpool") is None:
        return None, "zpool not installed"
    if os.path.exists("/dev/zfs"):
        return "openzfs", "ZFS kernel module (/dev/zfs)"
    if os.path.exists(ZFS_FUSE_SOCKET):
        return "zfs-fuse", f"zfs-fuse daemon ({ZFS_FUSE_SOCKET})"
    return None, "ZFS kernel module not loaded (no /dev/zfs) and no zfs-fuse daemon"


def require_zfs() -> None:
    """Clear errors when this machine cannot import pools read-only."""
    if shutil.which("zpool") is None:
        raise ToolMissingError("zpool: not installed; a ZFS member cannot be imported here",
                               hint="install zfsutils-linux (and the zfs kernel module), or use "
                                    "`ckptrescue fs inspect` for the vdev label")
    kind, _ = implementation()
    if kind == "zfs-fuse":
        raise ToolFailedError(
            "this host's ZFS is zfs-fuse (pool version 23): it has no read-only import "
            "(no `-o readonly=on`, no `-N`), and the kit never imports evidence read-write",
            hint="`ckptrescue fs inspect` reads the labels and the pool's state without "
                 "importing; import on a machine with OpenZFS")
    if kind is None:
        raise ToolFailedError("the ZFS kernel module is not loaded (no /dev/zfs)",
                              hint="load it (modprobe zfs) on a machine that has it, or use "
                                   "`ckptrescue fs inspect` for the vdev label")


def imported_pools(runner: SubprocessRunner) -> dict[str, str]:
    """{pool name: pool GUID} of the pools imported on this host."""
    res = runner.run(ToolCall.of("zpool", "list", "-H", "-o", "name,guid", timeout_s=60,
                                 purpose="pools already imported on this host"))
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        name, _, guid = line.partition("\t")
        if name:
            out[name] = guid.strip()
    return out


def _free_name(base: str, taken: set[str]) -> str:
    cand, n = base, 1
    while cand in taken:
        n += 1
        cand = f"{base}_{n}"
    return cand


def import_argv(guid: str, members: list[str], altroot: str, *, temp_name: str | None,
                force: bool) -> list[str]:
    argv = ["zpool", "import", "-o", "readonly=on", "-o", "cachefile=none", "-N",
            "-R", altroot]
    for m in members:
        argv += ["-d", m]
    if force:
        argv.append("-f")
    if temp_name:
        argv.append("-t")
    argv.append(guid)
    if temp_name:
        argv.append(temp_name)
    return argv


def import_readonly(runner: SubprocessRunner, *, members: list[str],
                    fsinfo: dict[str, str], altroot: str, images_only: bool,
                    evidence: str, on_imported: Any = None) -> PoolImport:
    """Import the pool of ``members`` read-only under ``altroot`` and mount its datasets ro.

    ``on_imported(pool_name)`` is called right after the import succeeds so that the caller can
    record the pool (the guard then allows exporting it) before anything else can fail.
    """
    require_zfs()
    name, guid = fsinfo.get("LABEL", ""), fsinfo.get("UUID", "")
    if not guid:
        raise ToolFailedError(f"{members[0]}: blkid gives no pool GUID for this ZFS member")
    live = imported_pools(runner)
    if guid in live.values():
        other = next(n for n, g in live.items() if g == guid)
        raise RefusedError(f"pool {name} (GUID {guid}) is already imported here as {other}",
                           hint="the evidence may be the live pool itself: image it first")
    # always a kit-made in-core name: the on-disk name may be stale, damaged or the host's own
    temp = _free_name(f"ckr_{guid[-8:]}", set(live))
    findings: list[Finding] = []
    argv = import_argv(guid, members, altroot, temp_name=temp, force=False)
    res = runner.run(ToolCall(argv=tuple(argv), timeout_s=600, purpose="import the pool read-only"))
    if res.refused:
        raise RefusedError(res.refused)
    forced = False
    if res.returncode != 0 and any(m in res.stderr for m in IN_USE_MARKERS):
        if not images_only:
            raise RefusedError(
                f"pool {name} was not exported: ZFS says it may be in use by another system",
                hint="image the device (`ckptrescue image`) and mount the image; the kit forces "
                     "a read-only import only of images on its own read-only loop devices")
        argv = import_argv(guid, members, altroot, temp_name=temp, force=True)
        res = runner.run(ToolCall(argv=tuple(argv), timeout_s=600,
                                  purpose="import the never-exported pool read-only (-f on a "
                                          "read-only loop device of an image)"))
        forced = True
        findings.append(Finding(
            "ZF010", Severity.WARNING, f"pool {name} was never exported: it was in use when the "
            "machine stopped; imported read-only with -f from a read-only image",
            evidence=evidence, source="mount", details={"stderr": res.stderr.strip()[:500]}))
    pool = temp
    if res.returncode != 0:
        # a timeout or a failure late in the import may still have left the pool imported:
        # record it (so that the guard lets the caller export it) before reporting the failure
        if imported_pools(runner).get(pool) == guid and on_imported is not None:
            on_imported(pool)
        first = next(iter((res.stderr or res.stdout).strip().splitlines()), "")
        raise ToolFailedError(f"zpool import failed (rc {res.returncode}): {first}",
                              hint="`ckptrescue fs inspect` reads the vdev labels without import")
    if imported_pools(runner).get(pool) != guid:
        raise ToolFailedError(f"zpool import reported success but no pool {pool} with GUID "
                              f"{guid} is imported")
    if on_imported is not None:
        on_imported(pool)
    imp = PoolImport(pool=pool, ondisk_name=name, guid=guid, argv=argv, forced=forced,
                     findings=findings)
    ro = runner.run(ToolCall.of("zpool", "get", "-Hp", "-o", "value", "readonly", pool,
                                timeout_s=60, purpose="check the pool is read-only"))
    if ro.stdout.strip() != "on":
        raise ToolFailedError(f"pool {pool} did not come up read-only "
                              f"(readonly={ro.stdout.strip()!r}); exporting it")
    imp.datasets = mount_datasets(runner, pool, evidence, imp.findings)
    imp.findings.append(Finding(
        "ZF011", Severity.INFO, f"pool {name or '?'} (GUID {guid}) imported under the temporary "
        f"name {temp} (on disk it keeps its name)", evidence=evidence, source="mount"))
    return imp


def mount_datasets(runner: SubprocessRunner, pool: str, evidence: str,
                   findings: list[Finding]) -> list[dict[str, Any]]:
    """``zfs mount -o ro`` each filesystem dataset that has a mountpoint; report the rest."""
    res = runner.run(ToolCall.of(
        "zfs", "list", "-H", "-p", "-o", "name,mountpoint,canmount,encryption,keystatus",
        "-t", "filesystem", "-r", pool, timeout_s=120, purpose="datasets of the imported pool"))
    out: list[dict[str, Any]] = []
    for line in res.stdout.splitlines():
        cols = line.split("\t")
        if len(cols) < 5:
            continue
        ds, mp, canmount, enc, keystatus = cols[:5]
        entry: dict[str, Any] = {"dataset": ds, "mountpoint": mp, "mounted": False}
        if canmount != "on" or mp in {"none", "legacy", "-"}:
            entry["reason"] = f"canmount={canmount} mountpoint={mp}"
        elif enc not in {"off", "-"} and keystatus != "available":
            entry["reason"] = f"encrypted ({enc}), key not loaded"
            findings.append(Finding("ZF012", Severity.WARNING, f"{ds} is encrypted and its key "
                                    "is not loaded: not mounted", evidence=evidence,
                                    source="mount"))
        else:
            m = runner.run(ToolCall.of("zfs", "mount", "-o", "ro,nosuid,nodev,noexec", ds,
                                       timeout_s=120, purpose="mount a dataset read-only"))
            entry["mounted"] = m.returncode == 0
            if m.refused or m.returncode != 0:
                entry["reason"] = (m.refused or m.stderr or m.stdout).strip()[:300]
        out.append(entry)
    return out


def export(runner: SubprocessRunner, pool: str, guid: str | None) -> None:
    """Export a pool this case imported read-only (unmounts its datasets), after checking that
    the pool of that name is still the one with the recorded GUID."""
    live = imported_pools(runner)
    if pool not in live:
        return
    if guid and live[pool] != guid:
        raise RefusedError(f"pool {pool} now has GUID {live[pool]}, not {guid}: not the pool "
                           "this case imported; not exporting it")
    res = runner.run(ToolCall.of("zpool", "export", pool, timeout_s=300,
                                 purpose="export the pool the kit imported read-only"))
    if res.refused:
        raise RefusedError(res.refused)
    if res.returncode != 0:
        raise ToolFailedError(f"zpool export {pool}: {res.stderr.strip()}",
                              hint="a process may still use a dataset (fuser -vm MOUNTPOINT)")

