"""LVM2 physical volumes, read without LVM and without device-mapper (a volume manager).

The PV label, metadata area and VG text metadata are parsed by ``parsers/lvm_metadata.py``. A
logical volume in one linear segment of this PV becomes its own read-only loop device
(``losetup --read-only --offset --sizelimit``); one of several linear segments is assembled only
when chosen (``dmsetup create --readonly ckr-…`` over the read-only PV, removed by
``loops.release``); other LVs are listed in ``info["unmapped_lvs"]``. The host's LVM never sees
the evidence: no ``vgchange``, no ``pvscan``, no metadata backup written.

LVM is not in the filesystem registry (``storage/filesystem.py``): it holds filesystems and has
none of a filesystem's hooks (mount options, inspection, offline locate, kernel log patterns);
``candidates.VOLUME_MANAGERS`` maps its blkid TYPE to :func:`candidates`.
"""

from __future__ import annotations

import os
from typing import Any

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import RefusedError, ToolFailedError
from ckptrescue.storage import sysfs
from ckptrescue.storage.candidates import FsCandidate, blkid
from ckptrescue.storage.loops import attach_slice, read_at


def candidates(runner: SubprocessRunner, info: dict[str, Any], pv_node: str,
                    pv_start: int) -> list[FsCandidate]:
    """Logical volumes of the LVM2 PV on ``pv_node`` (read without LVM or device-mapper): each
    LV that lies in one contiguous range of this PV gets its own read-only loop device; the
    others are listed in ``info["unmapped_lvs"]``."""
    from ckptrescue.storage.parsers import lvm_metadata

    try:
        pv = lvm_metadata.read_pv(read_at(pv_node))
    except (lvm_metadata.LvmError, OSError) as exc:
        info.setdefault("unmapped_lvs", []).append({"pv": pv_node, "reason": str(exc)})
        return []
    here = pv.pv_name
    found: list[FsCandidate] = []
    for lv in pv.vg.lvs:
        name = f"{pv.vg.name}/{lv.name}"
        segs = lv.segments
        pieces_of = [[pv_start + sg.pv_offset, pv_start + sg.pv_offset + sg.length]
                     for sg in segs if sg.pv == here and sg.pv_offset is not None]
        if "VISIBLE" not in lv.status:
            info.setdefault("unmapped_lvs", []).append({
                "lv": name, "segments": len(segs), "pieces": pieces_of, "reason": "hidden LV (a component of "
                "another: raid image, cache origin, thin data, snapshot store): not mapped"})
            continue
        if not segs or not all(sg.linear and sg.pv == here for sg in segs):
            kinds = ", ".join(sorted({sg.type for sg in segs})) or "no segments"
            info.setdefault("unmapped_lvs", []).append({
                "lv": name, "segments": len(segs), "pieces": pieces_of, "reason":
                f"segment types {kinds}, or on other PVs: not mapped (only linear segments on "
                "this PV are)"})
            continue
        if len(segs) == 1:
            seg = segs[0]
            assert seg.pv_offset is not None
            start = pv_start + seg.pv_offset
            dev = attach_slice(runner, info, start, seg.length, f"attach LV {name} read-only")
            fs = blkid(runner, dev) if dev else {}
            if not fs.get("TYPE"):
                info.setdefault("unmapped_lvs", []).append({
                    "lv": name, "segments": 1, "pieces": [[start, start + seg.length]],
                    "reason": "no filesystem found (blkid -p)" if dev else "could not attach"})
                continue
            found.append(FsCandidate(str(dev), fs, start, seg.length, f"LV {name}"))
            continue
        pieces = [(sg.lv_offset, sg.length, pv_start + (sg.pv_offset or 0)) for sg in segs]
        found.append(FsCandidate("", {}, pieces[0][2], lv.size, f"LV {name}", segments=pieces,
                                 pending=(pv_node, pv.vg.name, lv)))
    info.setdefault("lvm", []).append({"vg": pv.vg.name, "pv": here, "pv_uuid": pv.uuid,
                                       "lvs": [lv.name for lv in pv.vg.lvs]})
    return found


def assemble_lv(runner: SubprocessRunner, info: dict[str, Any], pv_node: str, vg: str,
                 lv: Any) -> str | None:
    """A read-only device-mapper device of linear ``lv`` over the read-only ``pv_node``
    (``dmsetup create --readonly``, recorded in ``info["dm_devices"]``); None without dm."""
    if not os.path.exists("/dev/mapper/control"):
        return None
    if not sysfs.is_readonly(sysfs.dev_name(pv_node)):
        raise RefusedError(f"{pv_node} is not read-only: refusing to assemble an LV over it")
    import re
    import uuid

    from ckptrescue.guard import KIT_DM_PREFIX

    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{vg}-{lv.name}")
    dm_name = f"{KIT_DM_PREFIX}{uuid.uuid4().hex[:8]}-{safe}"[:120]
    table = "".join(f"{sg.lv_offset // 512} {sg.length // 512} linear {pv_node} "
                    f"{(sg.pv_offset or 0) // 512}\n" for sg in lv.segments)
    assert runner.case is not None
    tdir = runner.case.work_dir / "lvm"
    tdir.mkdir(exist_ok=True)
    tfile = tdir / f"{dm_name}.table"
    tfile.write_text(table)
    res = runner.run(ToolCall.of("dmsetup", "create", "--readonly", "--noudevsync", dm_name,
                                 str(tfile), timeout_s=60,
                                 purpose=f"assemble LV {vg}/{lv.name} read-only"))
    if res.refused:
        raise RefusedError(res.refused)
    if res.returncode != 0:
        raise ToolFailedError(f"dmsetup create {dm_name}: {res.stderr.strip()[:300]}")
    info.setdefault("dm_devices", []).append(dm_name)
    res = runner.run(ToolCall.of("dmsetup", "info", "-c", "--noheadings", "-o", "blkdevname",
                                 dm_name, timeout_s=60, purpose="device node of the assembly"))
    kname = res.stdout.strip()
    if res.returncode != 0 or not kname:
        raise ToolFailedError(f"dmsetup info {dm_name}: no device name "
                              f"({res.stderr.strip()[:200]})")
    if not sysfs.is_readonly(kname):
        raise RefusedError(f"{dm_name} ({kname}) did not come up read-only")
    return f"/dev/{kname}"
