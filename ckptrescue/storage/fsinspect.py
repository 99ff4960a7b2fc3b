"""``fs inspect``: filesystem and device-health state, read-only, as findings plus artifacts.

The filesystem part comes from the filesystem registry (``storage/filesystem.py``): XFS
(``filesystems/xfs.py``: ``xfs_info``, ``xfs_db``, ``xfs_logprint``, ``xfs_repair -n``), ext2/3/4
(``filesystems/ext.py``: ``dumpe2fs -h``), ZFS members (``zfs_inspect.py``: labels, ``zpool
status -vP``, ``zpool events -v`` when the tools exist); a mounted filesystem's live sysfs state
(``/sys/fs/<fs>/DEV``) as each filesystem declares it. Device health for physical disks:
``smartctl -x -j`` (exit bitmask decoded) and, for NVMe, ``nvme smart-log``/``error-log -o
json``. Every tool output is an artifact in the case. Image files are attached with a read-only
loop device for the duration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import SubprocessRunner
from ckptrescue.errors import UsageError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity
from ckptrescue.storage import filesystem, samedisk, sysfs
from ckptrescue.storage.candidates import pick_filesystem
from ckptrescue.storage.filesystem import inspect_finding, run_tool
from ckptrescue.storage.loops import attached
from ckptrescue.storage.parsers import nvme, smartctl

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

_run = run_tool
_f = inspect_finding

# moved into the filesystem modules; importable from here as before
_MOVED = {"XFS_INCOMPAT_NEEDSREPAIR": "filesystems.xfs", "XFS_SYSFS": "filesystems.xfs",
          "preserve_xfs_log": "filesystems.xfs", "inspect_xfs": "filesystems.xfs",
          "EXT4_SYSFS": "filesystems.ext", "inspect_ext": "filesystems.ext",
          "inspect_zfs": "zfs_inspect", "label_findings": "zfs_inspect",
          "event_findings": "zfs_inspect", "zfs_findings": "zfs_inspect"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"ckptrescue.storage.{_MOVED[name]}"), name)
    raise AttributeError(name)


@dataclass
class InspectResult(Recorded):
    target: str
    device: str
    fstype: str | None
    facts: JsonObject = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"target": self.target, "device": self.device, "fstype": self.fstype,
                "facts": self.facts, "health": self.health,
                "findings": [f.to_json() for f in self.findings], "notes": self.notes}


def smart_findings(rep: smartctl.SmartReport, ev: str) -> list[Finding]:
    out: list[Finding] = []
    st = rep.exit_status
    if st & 0b110 and rep.passed is None:
        out.append(_f("SM005", Severity.INFO, "SMART not readable: " + "; ".join(
            rep.exit_meaning + rep.messages), ev, exit_status=st))
    if st & 0x08 or rep.passed is False:
        out.append(_f("SM001", Severity.CRITICAL, f"SMART overall health FAILED on {rep.model} "
                      f"{rep.serial}", ev, exit_status=st, exit_meaning=rep.exit_meaning))
    if st & 0x10:
        out.append(_f("SM002", Severity.ERROR, "prefail attributes at or below threshold: "
                      + ", ".join(rep.failing_attributes), ev))
    if st & 0x20:
        out.append(_f("SM003", Severity.WARNING, "attributes were at or below threshold in the "
                      "past", ev))
    if st & 0xC0 or (rep.error_log_count or 0) > 0 or (rep.self_test_errors or 0) > 0:
        out.append(_f("SM004", Severity.WARNING, f"error log records: {rep.error_log_count}, "
                      f"self-test errors: {rep.self_test_errors}", ev))
    bad_sectors = {k: v for k, v in rep.sector_counts.items() if v > 0}
    if bad_sectors:
        out.append(_f("SM006", Severity.ERROR, "sector counters: " + ", ".join(
            f"{k}={v}" for k, v in bad_sectors.items()), ev, **bad_sectors))
    if rep.nvme_health is not None:
        out += nvme_findings(nvme.parse_health(rep.nvme_health), ev)
    return out


def nvme_findings(h: nvme.NvmeHealth, ev: str) -> list[Finding]:
    out: list[Finding] = []
    if h.critical_warning:
        out.append(_f("NV001", Severity.CRITICAL, "NVMe critical warning: "
                      + ", ".join(h.critical_meaning), ev, critical_warning=h.critical_warning))
    if h.media_errors > 0:
        out.append(_f("NV002", Severity.ERROR, f"NVMe media and data integrity errors: "
                      f"{h.media_errors}", ev, media_errors=h.media_errors))
    if (h.available_spare is not None and h.spare_threshold is not None
            and h.available_spare < h.spare_threshold):
        out.append(_f("NV003", Severity.ERROR, f"NVMe available spare {h.available_spare}% below "
                      f"threshold {h.spare_threshold}%", ev))
    if h.percentage_used is not None and h.percentage_used >= 100:
        out.append(_f("NV004", Severity.WARNING, f"NVMe percentage used {h.percentage_used}%", ev))
    if h.error_log_entries > 0:
        out.append(_f("NV005", Severity.WARNING, f"NVMe error log entries: "
                      f"{h.error_log_entries}", ev, num_err_log_entries=h.error_log_entries))
    return out


def device_health(runner: SubprocessRunner, dev: str, ev: str) -> tuple[dict[str, Any],
                                                                        list[Finding]]:
    """SMART/NVMe health of the physical disk under ``dev`` (skipped for loop/ram devices)."""
    name = sysfs.parent_disk(sysfs.dev_name(dev))
    if name.startswith(("loop", "ram", "zram")):
        return {"skipped": f"/dev/{name} is virtual (no SMART)"}, []
    disk = f"/dev/{name}"
    health: dict[str, Any] = {"disk": disk}
    out: list[Finding] = []
    res = _run(runner, "smartctl", "-x", "-j", disk, purpose="device health (SMART)")
    rep = None
    try:
        rep = smartctl.parse(res.stdout)
        health["smartctl"] = rep.to_json()
        out += smart_findings(rep, disk)
    except (ValueError, KeyError) as exc:
        health["smartctl"] = {"error": f"unparseable output ({exc})", "rc": res.returncode}
    if name.startswith("nvme"):
        ctrl = disk  # a namespace node works for both log pages
        res = _run(runner, "nvme", "smart-log", ctrl, "-o", "json", purpose="NVMe health")
        if res.returncode == 0:
            try:
                h = nvme.parse_health(json.loads(res.stdout))
                health["nvme_smart_log"] = h.to_json()
                if rep is None or rep.nvme_health is None:
                    out += nvme_findings(h, disk)
            except ValueError:
                health["nvme_smart_log"] = {"error": "unparseable"}
        else:
            health["nvme_smart_log"] = {"rc": res.returncode, "stderr": res.stderr.strip()[:500]}
        res = _run(runner, "nvme", "error-log", ctrl, "-o", "json", purpose="NVMe error log")
        if res.returncode == 0:
            try:
                entries = nvme.parse_error_log(json.loads(res.stdout))
            except ValueError:
                health["nvme_error_log"] = {"error": "unparseable"}
            else:
                health["nvme_error_log"] = [e.to_json() for e in entries]
                nsid = sysfs.read_attr(sysfs.sys_dir(name) / "nsid")
                out += nvme_error_findings(entries, disk, sysfs.logical_sector_size(disk),
                                           int(nsid) if nsid and nsid.isdigit() else None)
        else:
            health["nvme_error_log"] = {"rc": res.returncode, "stderr": res.stderr.strip()[:500]}
    return health, out


def nvme_error_findings(entries: list[nvme.NvmeErrorEntry], ev: str, lba_size: int,
                        nsid: int | None = None) -> list[Finding]:
    """Media errors of the (controller-wide) Error Information Log, with the failing LBAs as
    byte ranges when they belong to the inspected namespace ``nsid`` (whose LBA size is
    ``lba_size``); entries of other namespaces are listed without byte ranges."""
    media = [e for e in entries if e.is_media_error]
    if not media:
        return []
    ranges = sorted({(e.nsid, e.lba * lba_size, (e.lba + 1) * lba_size) for e in media
                     if nsid is None or e.nsid in {nsid, 0xFFFFFFFF}})
    return [_f("NV006", Severity.ERROR, f"NVMe error log: {len(media)} media error(s): "
               + "; ".join(e.describe() for e in media[:5]), ev,
               entries=[e.to_json() for e in media],
               byte_ranges=[{"nsid": n, "start": a, "end": b} for n, a, b in ranges],
               lba_size=lba_size)]


def mounted_state(dev: str) -> JsonObject:
    """Read-only sysfs state of a *mounted* filesystem on ``dev`` (``/sys/fs/{ext4,xfs}/NAME``):
    the live error counters and log head/tail. Only reads; the ``trigger_*`` and error
    injection attributes are never touched."""
    name = sysfs.dev_name(dev)
    out: dict[str, Any] = {}
    for fs in filesystem.registry():
        if not fs.sysfs_dir:
            continue
        base = Path("/sys/fs") / fs.sysfs_dir / name
        if base.is_dir():
            out[fs.sysfs_dir] = {a: sysfs.read_attr(base / a) for a in fs.sysfs_attrs
                                 if (base / a).exists()}
    mounts = sysfs.mounts_of_device(name)
    if mounts:
        out["mounts"] = [{"mountpoint": m.mountpoint, "options": ",".join(m.options),
                          "super_options": ",".join(m.super_options)} for m in mounts]
    return out


def fs_inspect(target: str | Path, *, case: Case, health: bool = True,
               select: str | None = None, runner: SubprocessRunner | None = None) -> InspectResult:
    """Inspect ``target`` (image file or block device) without changing it."""
    runner = runner or SubprocessRunner(case)
    ev = str(target)
    with attached(target, case=case, require_block=False, purpose="fs inspect",
                  runner=runner) as info:
        dev = info["device"]
        try:
            node, fsinfo, start = pick_filesystem(runner, info, case, select)
        except UsageError:
            raise  # several filesystems, or no such --filesystem: the user must choose
        except Exception as exc:  # no filesystem: still report health
            node, fsinfo, start = dev, {}, 0
            note = f"no filesystem identified: {exc}"
        else:
            note = ""
        fstype = fsinfo.get("TYPE")
        result = InspectResult(target=ev, device=node, fstype=fstype,
                               facts={"blkid": fsinfo, "partition_start": start})
        if note:
            result.notes.append(note)
        checked = filesystem.get(fstype).inspect(runner, node, fsinfo, ev, case=case,
                                                 target=str(target))
        facts, found = checked if checked is not None else ({}, [])
        if checked is None and fstype:
            result.notes.append(f"{fstype}: no filesystem-specific checks")
        result.facts.update(facts)
        result.findings += found
        live = mounted_state(node)
        if live:
            result.facts["mounted"] = live
            for fs in filesystem.registry():
                result.findings += fs.mounted_findings(live, result.findings, ev)
        if health and info["loop_device"] is None:
            try:
                leaves = sorted(samedisk.physical_leaves(dev))
            except (samedisk.UnknownMediaError, OSError):
                leaves = []
            result.facts["physical_leaves"] = leaves
            result.health, found = device_health(runner, dev, ev)
            result.findings += found
        elif health:
            result.notes.append("image file: device health applies to the disk it came from")
    result.findings_here()  # the engine records the findings, then the summary
    result.record("fs.inspected", {k: v for k, v in result.to_json().items() if k != "findings"})
    return result
