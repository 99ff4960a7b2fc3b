"""``fs inspect``: filesystem and device-health state, read-only, as findings plus artifacts.

XFS: ``xfs_info``, ``xfs_db -r -c "sb 0" -c print``, ``xfs_db -r -c version``, ``xfs_logprint -t``
(CLEAN/DIRTY; head/tail are not in the superblock), NEEDSREPAIR (``features_incompat & 0x10``)
and ``features_log_incompat``, ``xfs_repair -n`` (rc 1 on corruption *and* on a dirty log).
ext2/3/4: ``dumpe2fs -h`` (needs_recovery, state, error count and first/last error).
ZFS members: ``zpool status -vP``, ``zpool events -v`` when the tools exist.
Device health for physical disks: ``smartctl -x -j`` (exit bitmask decoded) and, for NVMe,
``nvme smart-log``/``error-log -o json``. Every tool output is an artifact in the case.
Image files are attached with a read-only loop device for the duration.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import SubprocessRunner, ToolCall, ToolResult
from ckptrescue.errors import UsageError
from ckptrescue.model import Finding, Severity
from ckptrescue.parsers import (
    dumpe2fs,
    nvme,
    smartctl,
    xfs_db,
    xfs_logprint,
    zfs_get,
    zpool_events,
    zpool_status,
)
from ckptrescue.storage import mounting, samedisk, sysfs

if TYPE_CHECKING:
    from ckptrescue.case import Case

XFS_INCOMPAT_NEEDSREPAIR = 0x10


@dataclass
class InspectResult:
    target: str
    device: str
    fstype: str | None
    facts: dict[str, Any] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "device": self.device, "fstype": self.fstype,
                "facts": self.facts, "health": self.health,
                "findings": [f.to_json() for f in self.findings], "notes": self.notes}


def _run(runner: SubprocessRunner, *argv: str, purpose: str, timeout: float = 600) -> ToolResult:
    return runner.run(ToolCall(argv=tuple(argv), timeout_s=timeout, purpose=purpose))


def _f(code: str, sev: Severity, title: str, ev: str, **details: Any) -> Finding:
    return Finding(code, sev, title, evidence=ev, source="fs inspect", details=details)


def preserve_xfs_log(runner: SubprocessRunner, case: Case, dev: str) -> dict[str, Any]:
    """Copy the internal log (``xfs_logprint -C``) into the case before anything else reads
    the filesystem: it is exactly what a replay would consume."""
    tmp = case.work_dir / f"xfs-log-{os.getpid()}-{time.monotonic_ns()}.bin"
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
    facts: dict[str, Any] = {}
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


def inspect_ext(runner: SubprocessRunner, dev: str, ev: str) -> tuple[dict[str, Any],
                                                                      list[Finding]]:
    res = _run(runner, "dumpe2fs", "-h", dev, purpose="ext superblock")
    sb = dumpe2fs.parse(res.stdout)
    facts = {"dumpe2fs": sb.to_json()}
    out: list[Finding] = []
    if sb.needs_recovery:
        out.append(_f("E4001", Severity.ERROR, "ext4 journal needs recovery (needs_recovery): "
                      "mount only with ro,noload; replay only on a copy", ev,
                      journal_start=sb.fields.get("Journal start")))
    elif "has_journal" in sb.features:
        out.append(_f("E4004", Severity.INFO, "ext4 journal is clean", ev))
    if sb.state and sb.state != "clean":
        out.append(_f("E4002", Severity.ERROR, f"ext4 filesystem state: {sb.state}", ev))
    if sb.error_count or sb.errors:
        out.append(_f("E4003", Severity.ERROR, f"ext4 recorded {sb.error_count} error(s)", ev,
                      **sb.errors))
    return facts, out


def inspect_zfs(runner: SubprocessRunner, node: str, fsinfo: dict[str, str],
                ev: str, target: str = "") -> tuple[dict[str, Any], list[Finding]]:
    """A ZFS member: its labels and uberblocks (read directly, no ZFS needed), then — where the
    ZFS tools and kernel module exist — the pool's live state when it is imported here
    (``zpool status -vP`` and ``-j``, ``zpool events -v``, ``zfs get``), or else what an
    import scan of this member would find (``zpool import -d MEMBER``: imports nothing)."""
    from ckptrescue.parsers import zfs_label

    facts: dict[str, Any] = {}
    out: list[Finding] = []
    try:
        size = sysfs.size_bytes(node)
        fd = os.open(node, os.O_RDONLY)
        try:
            rep = zfs_label.read_member(lambda off, n: os.pread(fd, n, off), size)
        finally:
            os.close(fd)
    except (OSError, zfs_label.NvlistError) as exc:
        facts["label"] = {"error": str(exc)}
        out.append(_f("ZF007", Severity.ERROR, f"ZFS labels unreadable: {exc}", ev))
        rep = None
    if rep is not None:
        facts["label"] = rep.summary()
        out += label_findings(rep, ev)
    guid = str((facts.get("label") or {}).get("pool_guid") or fsinfo.get("UUID") or "")
    name = str((facts.get("label") or {}).get("pool") or fsinfo.get("LABEL") or "")
    if shutil.which("zpool") is None or not os.path.exists("/dev/zfs"):
        facts["zfs_tools"] = ("zpool not installed" if shutil.which("zpool") is None
                              else "ZFS kernel module not loaded (no /dev/zfs)")
        return facts, out
    from ckptrescue.storage import zfs_pool

    live = {g: n for n, g in zfs_pool.imported_pools(runner).items()}
    pool = live.get(guid)
    if pool is None:
        res = _run(runner, "zpool", "import", "-d", node, purpose="import scan (imports nothing)")
        facts["import_scan_rc"] = res.returncode
        found = [p for p in zpool_status.parse(res.stdout) if p.pool == name] or \
            zpool_status.parse(res.stdout)
        if found:
            facts["import_scan"] = {"state": found[0].state, "status": found[0].status,
                                    "action": found[0].action}
            out += zfs_findings(found[:1], ev)
        return facts, out
    facts["pool"] = pool
    res = _run(runner, "zpool", "status", "-vP", pool, purpose="zfs pool status")
    facts["zpool_status_rc"] = res.returncode
    pools = zpool_status.parse(res.stdout)
    vdev_paths = [v.name for p in pools for v in p.vdevs if v.name.startswith("/")]
    if not any(_same_member(v, node, target) for v in vdev_paths):
        facts["live_pool_skipped"] = (f"pool {pool} imported here has this GUID but none of its "
                                      f"devices ({', '.join(vdev_paths) or '?'}) is this member: "
                                      "a clone; its live state is not this evidence's")
        return facts, out
    js = _run(runner, "zpool", "status", "-j", "--json-int", "-vP", pool,
              purpose="zfs pool status (JSON, OpenZFS >= 2.3)")
    if js.returncode == 0:
        from ckptrescue.parsers import zpool_json

        try:
            pools = zpool_json.parse(js.stdout) or pools
            facts["zpool_status_json"] = True
        except ValueError as exc:
            facts["zpool_status_json"] = f"unparseable: {exc}"
    out += zfs_findings(pools, ev)
    ev_res = _run(runner, "zpool", "events", "-v", purpose="zfs events")
    out += event_findings(zpool_events.parse(ev_res.stdout), guid, ev)
    props = _run(runner, "zfs", "get", "-Hp", "-o", "name,property,value,source",
                 "checksum,compression,compressratio,recordsize,copies,encryption,readonly",
                 "-r", pool, purpose="zfs props")
    parsed = zfs_get.parse(props.stdout)
    facts["datasets"] = {d: {k: v.value for k, v in pr.items()} for d, pr in parsed.items()}
    off = sorted(d for d, pr in parsed.items() if pr.get("checksum") and
                 pr["checksum"].value == "off")
    if off:
        out.append(_f("ZF005", Severity.WARNING, "checksum=off on " + ", ".join(off)
                      + ": ZFS cannot detect corruption there", ev, datasets=off))
    return facts, out


def _same_member(vdev_path: str, node: str, target: str) -> bool:
    """Is the pool's device ``vdev_path`` this member (``node``, attached from ``target``)?
    Loop devices compare by backing file, block devices by device number."""
    try:
        a, b = os.stat(vdev_path), os.stat(node)
    except OSError:
        return False
    if a.st_rdev == b.st_rdev:
        return True
    name = os.path.basename(os.path.realpath(vdev_path))
    backing = sysfs.loop_backing_file(name) if name.startswith("loop") else None
    return bool(backing) and os.path.realpath(str(backing)) == os.path.realpath(target)


def label_findings(rep: Any, ev: str) -> list[Finding]:
    """Findings from a member's labels (``zfs_label.MemberReport``)."""
    import datetime

    out: list[Finding] = []
    s = rep.summary()
    if not s["labels_valid"]:
        out.append(_f("ZF007", Severity.ERROR, "no readable ZFS label on this member", ev,
                      labels=s["labels_invalid"]))
        return out
    if s["labels_invalid"]:
        out.append(_f("ZF007", Severity.ERROR, f"ZFS labels {sorted(s['labels_invalid'])} "
                      "unreadable (front or back of the device damaged?)", ev,
                      labels=s["labels_invalid"]))
    if s["state"] == "ACTIVE":
        ub = s["uberblock"] or {}
        when = ""
        if ub.get("timestamp"):
            when = " at " + datetime.datetime.fromtimestamp(
                ub["timestamp"], datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        out.append(_f("ZF006", Severity.WARNING, f"pool {s['pool']} was not exported: in use "
                      f"on host {s['hostname'] or s['hostid'] or '?'} when it stopped; last "
                      f"commit txg {ub.get('txg', s['txg'])}{when}", ev,
                      hostname=s["hostname"], hostid=s["hostid"], uberblock=ub))
    return out


def event_findings(events: list[Any], pool_guid: str, ev: str) -> list[Finding]:
    """Error events (checksum, I/O, data, ...) of the pool ``pool_guid`` from ``zpool events
    -v``, with the failed I/O's byte range on the member device when the event gives it."""
    mine = [e for e in events if e.is_error and (
        not pool_guid or str(e.get("pool_guid", "")) == pool_guid)]
    if not mine:
        return []
    by_class: dict[str, int] = {}
    for e in mine:
        by_class[e.cls] = by_class.get(e.cls, 0) + 1
    ranges = sorted({(str(e.get("vdev_path", "")), *r) for e in mine
                     if (r := e.device_range()) is not None})
    return [_f("ZF004", Severity.ERROR, f"ZFS event log: {len(mine)} error event(s) ("
               + ", ".join(f"{k.rsplit('.', 1)[-1]} {v}" for k, v in sorted(by_class.items()))
               + ")", ev, classes=by_class,
               device_ranges=[{"vdev": v, "start": a, "end": b} for v, a, b in ranges[:200]],
               objects=sorted({(e.get("zio_objset"), e.get("zio_object"))
                               for e in mine if e.get("zio_object") is not None})[:200])]


def zfs_findings(pools: list[zpool_status.PoolStatus], ev: str) -> list[Finding]:
    out: list[Finding] = []
    for p in pools:
        if p.state and p.state != "ONLINE":
            out.append(_f("ZF001", Severity.ERROR, f"pool {p.pool} is {p.state}", ev,
                          status=p.status, action=p.action))
        bad = [v for v in p.vdevs if v.read or v.write or v.cksum]
        if bad:
            out.append(_f("ZF002", Severity.ERROR, f"pool {p.pool}: errors on "
                          + ", ".join(f"{v.name} (R{v.read} W{v.write} C{v.cksum})" for v in bad),
                          ev, vdevs=[v.__dict__ for v in bad]))
        if p.error_files or (p.data_errors or 0) > 0:
            out.append(_f("ZF003", Severity.CRITICAL, f"pool {p.pool}: permanent errors in "
                          f"{len(p.error_files) or p.data_errors} file(s)", ev,
                          files=p.error_files))
    return out


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


EXT4_SYSFS = ("errors_count", "first_error_time", "first_error_func", "first_error_block",
              "first_error_ino", "first_error_errcode", "last_error_time", "last_error_func",
              "last_error_block", "last_error_ino", "last_error_errcode", "lifetime_write_kbytes")
XFS_SYSFS = ("log/log_head_lsn", "log/log_tail_lsn", "log/reserve_grant_head_bytes",
             "log/write_grant_head_bytes")


def mounted_state(dev: str) -> dict[str, Any]:
    """Read-only sysfs state of a *mounted* filesystem on ``dev`` (``/sys/fs/{ext4,xfs}/NAME``):
    the live error counters and log head/tail. Only reads; the ``trigger_*`` and error
    injection attributes are never touched."""
    name = sysfs.dev_name(dev)
    out: dict[str, Any] = {}
    for fs, attrs in (("ext4", EXT4_SYSFS), ("xfs", XFS_SYSFS)):
        base = Path("/sys/fs") / fs / name
        if base.is_dir():
            out[fs] = {a: sysfs.read_attr(base / a) for a in attrs
                       if (base / a).exists()}
    mounts = sysfs.mounts_of_device(name)
    if mounts:
        out["mounts"] = [{"mountpoint": m.mountpoint, "options": ",".join(m.options),
                          "super_options": ",".join(m.super_options)} for m in mounts]
    return out


def fs_inspect(target: str | Path, *, case: Case, health: bool = True,
               select: str | None = None) -> InspectResult:
    """Inspect ``target`` (image file or block device) without changing it."""
    runner = SubprocessRunner(case)
    ev = str(target)
    with mounting.attached(target, case=case, require_block=False,
                           purpose="fs inspect") as info:
        dev = info["device"]
        try:
            node, fsinfo, start = mounting.pick_filesystem(runner, info, case, select)
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
        if fstype == "xfs":
            facts, found = inspect_xfs(runner, node, ev, case)
        elif fstype in {"ext2", "ext3", "ext4"}:
            facts, found = inspect_ext(runner, node, ev)
        elif fstype == "zfs_member":
            facts, found = inspect_zfs(runner, node, fsinfo, ev, str(target))
        else:
            facts, found = {}, []
            if fstype:
                result.notes.append(f"{fstype}: no filesystem-specific checks")
        result.facts.update(facts)
        result.findings += found
        live = mounted_state(node)
        if live:
            result.facts["mounted"] = live
            errors = int((live.get("ext4") or {}).get("errors_count") or 0)
            if errors and not any(f.code == "E4003" for f in result.findings):
                result.findings.append(_f("E4003", Severity.ERROR, f"ext4 (mounted) has "
                                          f"recorded {errors} error(s)", ev, **live["ext4"]))
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
    case.add_findings(result.findings)
    case.log("fs.inspected", {k: v for k, v in result.to_json().items() if k != "findings"})
    return result
