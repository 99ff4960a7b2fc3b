"""``fs inspect`` of a ZFS member (reached through ``filesystems/zfs.py``): its labels and
uberblocks (read directly, no ZFS needed), then — where the ZFS tools and kernel module exist —
the pool's live state when it is imported here (``zpool status -vP`` and ``-j``, ``zpool events
-v``, ``zfs get``), or else what an import scan of this member would find (``zpool import -d
MEMBER``: imports nothing)."""

from __future__ import annotations

import os
import re
from typing import Any

from ckptrescue.effects.runner import SubprocessRunner
from ckptrescue.model import Finding, JsonObject, Severity
from ckptrescue.storage import sysfs
from ckptrescue.storage.filesystem import inspect_finding, run_tool
from ckptrescue.storage.parsers import zfs_get, zpool_events, zpool_status

_run = run_tool
_f = inspect_finding


def inspect_zfs(runner: SubprocessRunner, node: str, fsinfo: dict[str, str],
                ev: str, target: str = "") -> tuple[dict[str, Any], list[Finding]]:
    """A ZFS member: its labels and uberblocks (read directly, no ZFS needed), then — where the
    ZFS tools and kernel module exist — the pool's live state when it is imported here
    (``zpool status -vP`` and ``-j``, ``zpool events -v``, ``zfs get``), or else what an
    import scan of this member would find (``zpool import -d MEMBER``: imports nothing)."""
    from ckptrescue.storage.parsers import zfs_label

    facts: JsonObject = {}
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
    from ckptrescue.storage import zfs_pool

    kind, why = zfs_pool.implementation()
    if kind is None:
        facts["zfs_tools"] = why
        return facts, out
    facts["zfs_implementation"] = kind
    live = {g: n for n, g in zfs_pool.imported_pools(runner).items()}
    pool = live.get(guid)
    if pool is None:
        res = _import_scan(runner, node, kind)
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
    if res.returncode != 0 and "invalid option 'P'" in res.stderr:
        # zfs-fuse (and ZFS before -P): no full-path option; file vdevs print full paths anyway
        res = _run(runner, "zpool", "status", "-v", pool, purpose="zfs pool status (no -P here)")
        facts["zpool_status_form"] = "-v (this zpool has no -P)"
    facts["zpool_status_rc"] = res.returncode
    pools = zpool_status.parse(res.stdout)
    vdev_paths = [v.name for p in pools for v in p.vdevs if v.name.startswith("/")]
    if not any(_same_member(v, node, target) for v in vdev_paths):
        facts["live_pool_skipped"] = (f"pool {pool} imported here has this GUID but none of its "
                                      f"devices ({', '.join(vdev_paths) or '?'}) is this member: "
                                      "a clone; its live state is not this evidence's")
        return facts, out
    js = _run(runner, "zpool", "status", "-j", "--json-int", "-vP", pool,
              purpose="zfs pool status (JSON, OpenZFS >= 2.3)") if kind == "openzfs" else None
    if js is not None and js.returncode == 0:
        from ckptrescue.storage.parsers import zpool_json

        try:
            pools = zpool_json.parse(js.stdout) or pools
            facts["zpool_status_json"] = True
        except ValueError as exc:
            facts["zpool_status_json"] = f"unparseable: {exc}"
    out += zfs_findings(pools, ev)
    ev_res = _run(runner, "zpool", "events", "-v", purpose="zfs events")
    if ev_res.returncode != 0 and "unrecognized command 'events'" in ev_res.stderr:
        facts["zpool_events"] = "this ZFS keeps no event log (zfs-fuse): none read"
    out += event_findings(zpool_events.parse(ev_res.stdout), guid, ev)
    parsed = _zfs_get(runner, pool, facts)
    facts["datasets"] = {d: {k: v.value for k, v in pr.items()} for d, pr in parsed.items()}
    off = sorted(d for d, pr in parsed.items() if pr.get("checksum") and
                 pr["checksum"].value == "off")
    if off:
        out.append(_f("ZF005", Severity.WARNING, "checksum=off on " + ", ".join(off)
                      + ": ZFS cannot detect corruption there", ev, datasets=off))
    return facts, out


PROPERTIES = ("checksum", "compression", "compressratio", "recordsize", "copies", "encryption",
              "readonly")
_BAD_PROPERTY = re.compile(r"invalid property '([^']+)'")


def _zfs_get(runner: SubprocessRunner, pool: str, facts: JsonObject) -> JsonObject:
    """``zfs get -Hp`` of the pool's datasets. A ZFS that does not know a property (zfs-fuse has
    no ``encryption``) refuses the whole list: ask again without it, and say which were left."""
    props = list(PROPERTIES)
    unknown: list[str] = []
    while True:
        res = _run(runner, "zfs", "get", "-Hp", "-o", "name,property,value,source",
                   ",".join(props), "-r", pool, purpose="zfs props")
        bad = _BAD_PROPERTY.search(res.stderr) if res.returncode != 0 else None
        if bad is None or bad.group(1) not in props or len(props) == 1:
            break
        props.remove(bad.group(1))
        unknown.append(bad.group(1))
    if unknown:
        facts["zfs_properties_unknown_here"] = unknown
    return zfs_get.parse(res.stdout)


def _import_scan(runner: SubprocessRunner, node: str, kind: str) -> Any:
    """``zpool import -d`` (lists what it finds, imports nothing). OpenZFS takes the device;
    zfs-fuse takes only a directory: a fresh one holding a link to the device."""
    if kind != "zfs-fuse":
        return _run(runner, "zpool", "import", "-d", node, purpose="import scan (imports nothing)")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ckptrescue-zscan-") as tmp:
        os.symlink(node, os.path.join(tmp, os.path.basename(node)))
        return _run(runner, "zpool", "import", "-d", tmp,
                    purpose="import scan (imports nothing; zfs-fuse scans a directory)")


def _same_member(vdev_path: str, node: str, target: str) -> bool:
    """Is the pool's device ``vdev_path`` this member (``node``, attached from ``target``)?
    Loop devices compare by backing file, block devices by device number, a file vdev (a pool
    built on image files) by its path."""
    if target and os.path.realpath(vdev_path) == os.path.realpath(target):
        return True
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
