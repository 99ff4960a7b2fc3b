"""What ``mount`` recorded: ``CASE/work/mounts/<id>.json`` per mount point, so that ``umount``
releases exactly what was attached (and what a failed mount could not release stays recorded
for the next ``umount``)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.model import Finding, Recorded
from ckptrescue.storage.loops import release

if TYPE_CHECKING:
    from ckptrescue.effects.runner import SubprocessRunner
    from ckptrescue.record.case import Case


@dataclass
class MountResult(Recorded):
    mountpoint: str
    device: str  # the node that was mounted (a partition when the image is partitioned)
    fstype: str
    options: str
    target: str
    loop_device: str | None = None
    backing_file: str | None = None
    set_readonly: list[str] = field(default_factory=list)
    partition_start: int = 0
    uuid: str | None = None
    extra_loops: list[dict[str, Any]] = field(default_factory=list)
    dm_devices: list[str] = field(default_factory=list)  # read-only LV assemblies (dmsetup)
    segments: list[list[int]] | None = None  # [fs offset, length, device offset] of an LV
    zfs_pool: str | None = None  # in-core name of a pool imported read-only (ZFS members)
    members: list[dict[str, Any]] = field(default_factory=list)  # other pool members attached
    datasets: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [f.to_json() for f in self.findings]
        return data


def state_dir(case: Case) -> Path:
    d = case.work_dir / "mounts"
    d.mkdir(exist_ok=True)
    return d


def state_path(case: Case, mountpoint: str) -> Path:
    key = hashlib.sha256(os.path.realpath(mountpoint).encode()).hexdigest()[:16]
    return state_dir(case) / f"{key}.json"


def mount_state(case: Case, mountpoint: str | Path) -> dict[str, Any] | None:
    """What :func:`mount` recorded for ``mountpoint`` in this case (None if not a kit mount)."""
    path = state_path(case, str(mountpoint))
    return json.loads(path.read_text()) if path.exists() else None


def zfs_mount_holding(case: Case, path: str | Path) -> dict[str, Any] | None:
    """The record of a ZFS pool this case imported whose altroot holds ``path``, if any."""
    real = os.path.realpath(path)
    for rec in sorted(state_dir(case).glob("*.json")):
        data = json.loads(rec.read_text())
        mp = os.path.realpath(str(data.get("mountpoint", "")))
        if data.get("zfs_pool") and (real == mp or real.startswith(mp.rstrip("/") + "/")):
            return dict(data)
    return None


def release_or_keep(info: dict[str, Any], case: Case, state: Path,
                     members: list[dict[str, Any]] | None = None, *,
                     runner: SubprocessRunner | None = None) -> None:
    """Release after a failed mount (the pool members first); what could not be released stays
    recorded at ``state`` so that ``umount`` can finish the job."""
    problems: list[str] = []
    kept = []
    for m_info in members or []:
        trouble = release(m_info, case=case, runner=runner)
        if trouble:
            kept.append(m_info)
            problems += trouble
    problems += release(info, case=case, runner=runner)
    if problems:
        state.write_text(json.dumps({**{k: info.get(k) for k in (
            "target", "loop_device", "backing_file", "set_readonly", "extra_loops",
            "dm_devices")}, "device": info.get("device"), "failed_mount": True,
            "members": kept, "problems": problems}, indent=2) + "\n")
