"""``devices``: block-device inventory from sysfs (plus udev properties when pyudev has them).

Per device: path, model, serial, WWN, size, logical/physical sector size, read-only flag,
partitions (with start offsets), holders and slaves (the dm/LVM/md stack), mount points and
options, and the physical leaves it sits on (``samedisk``). Read-only; no tool runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ckptrescue.model import JsonObject
from ckptrescue.storage import samedisk, sysfs


@dataclass
class Device:
    name: str
    path: str
    type: str  # disk, part, loop, dm, md, ...
    size: int
    logical_sector_size: int | None
    physical_sector_size: int | None
    readonly: bool
    removable: bool | None = None
    rotational: bool | None = None
    model: str | None = None
    serial: str | None = None
    wwn: str | None = None
    partition_start: int | None = None
    partitions: list[str] = field(default_factory=list)
    holders: list[str] = field(default_factory=list)
    slaves: list[str] = field(default_factory=list)
    loop_backing_file: str | None = None
    mounts: list[dict[str, Any]] = field(default_factory=list)
    physical_leaves: list[str] = field(default_factory=list)
    udev: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return asdict(self)


def _kind(name: str) -> str:
    if sysfs.is_partition(name):
        return "part"
    for prefix, kind in (("loop", "loop"), ("dm-", "dm"), ("md", "md"), ("zram", "zram"),
                         ("nvme", "disk"), ("sd", "disk"), ("vd", "disk"), ("xvd", "disk")):
        if name.startswith(prefix):
            return kind
    return "disk"


def _udev_props(name: str) -> dict[str, str]:
    try:
        import pyudev
    except ImportError:
        return {}
    try:
        dev = pyudev.Devices.from_name(pyudev.Context(), "block", name)
    except Exception:  # udev database missing (containers) or device gone
        return {}
    keep = ("ID_MODEL", "ID_SERIAL", "ID_SERIAL_SHORT", "ID_WWN", "ID_BUS", "ID_PATH",
            "ID_FS_TYPE", "ID_FS_UUID", "ID_PART_TABLE_TYPE", "DEVTYPE")
    return {k: str(dev.properties[k]) for k in keep if k in dev.properties}


def device(name: str) -> Device:
    base = sysfs.sys_dir(name)
    disk = sysfs.sys_dir(sysfs.parent_disk(name))
    queue = disk / "queue"

    def num(path: Any) -> int | None:
        v = sysfs.read_attr(path)
        return int(v) if v and v.isdigit() else None

    size_sectors = num(base / "size") or 0
    rot, rem = num(queue / "rotational"), num(disk / "removable")
    udev = _udev_props(name)
    dev = Device(
        name=name, path=f"/dev/{name}", type=_kind(name), size=size_sectors * 512,
        logical_sector_size=num(queue / "logical_block_size"),
        physical_sector_size=num(queue / "physical_block_size"),
        readonly=sysfs.is_readonly(name),
        removable=None if rem is None else bool(rem),
        rotational=None if rot is None else bool(rot),
        model=sysfs.read_attr(disk / "device" / "model") or udev.get("ID_MODEL"),
        serial=(sysfs.read_attr(disk / "device" / "serial") or udev.get("ID_SERIAL_SHORT")),
        wwn=(sysfs.read_attr(disk / "wwid") or sysfs.read_attr(disk / "device" / "wwid")
             or udev.get("ID_WWN")),
        partition_start=sysfs.partition_start_bytes(name) if sysfs.is_partition(name) else None,
        partitions=[] if sysfs.is_partition(name) else sysfs.partitions(name),
        holders=sysfs.holders(name), slaves=sysfs.slaves(name),
        loop_backing_file=sysfs.loop_backing_file(name) if name.startswith("loop") else None,
        mounts=[{"mountpoint": m.mountpoint, "fstype": m.fstype,
                 "options": ",".join(m.options), "super_options": ",".join(m.super_options)}
                for m in sysfs.mounts_of_device(name)],
        udev=udev,
    )
    try:
        dev.physical_leaves = sorted(samedisk.physical_leaves(dev.path))
    except (samedisk.UnknownMediaError, OSError) as exc:
        dev.physical_leaves = [f"unknown: {exc}"]
    return dev


def devices(*, include_empty: bool = False) -> list[Device]:
    """Every block device the kernel lists (loop devices without a backing file skipped)."""
    out = []
    for entry in sorted(sysfs.SYS_BLOCK.iterdir(), key=lambda p: p.name):
        name = entry.name
        if name.startswith(("loop", "ram")) and not include_empty and \
                not sysfs.loop_backing_file(name):
            continue
        out.append(device(name))
    return out
