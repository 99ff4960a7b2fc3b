"""What ``mount`` recorded: a ``storage.mount_state`` record in the case's hash-chained log per
mount point, so that ``umount`` releases exactly what was attached (and what a failed mount
could not release stays recorded for the next ``umount``). Nothing is read from ``CASE/work/``,
where a tool could have written."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.model import Finding, JsonObject, Recorded
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

    def to_json(self) -> JsonObject:
        data = asdict(self)
        data["findings"] = [f.to_json() for f in self.findings]
        return data


STATE_RECORD = "storage.mount_state"


def _key(mountpoint: str | Path) -> str:
    return os.path.realpath(mountpoint)


def record_state(case: Case, mountpoint: str | Path, state: dict[str, Any] | None) -> None:
    """Record (in the hash-chained log, the only authority) what the kit holds at a mount point
    — or, with ``None``, that it holds nothing there any more."""
    case.log(STATE_RECORD, {"mountpoint": _key(mountpoint), "state": state})


def _states(case: Case) -> dict[str, dict[str, Any]]:
    live: dict[str, dict[str, Any]] = {}
    for rec in case.records(STATE_RECORD):
        details = rec.get("details") or {}
        mp, state = details.get("mountpoint"), details.get("state")
        if not isinstance(mp, str):
            continue
        if isinstance(state, dict):
            live[mp] = state
        else:
            live.pop(mp, None)
    return live


def held(case: Case) -> dict[str, dict[str, Any]]:
    """Every mount point this case still holds something at (by the log), with its record."""
    return _states(case)


def mount_state(case: Case, mountpoint: str | Path) -> JsonObject | None:
    """What :func:`mount` recorded for ``mountpoint`` in this case's log (None if not a kit
    mount, or unmounted since). Never read from a file a tool could have written."""
    state = _states(case).get(_key(mountpoint))
    return dict(state) if state is not None else None


def zfs_mount_holding(case: Case, path: str | Path) -> JsonObject | None:
    """The record of a ZFS pool this case imported whose altroot holds ``path``, if any."""
    real = os.path.realpath(path)
    for data in _states(case).values():
        mp = os.path.realpath(str(data.get("mountpoint", "")))
        if data.get("zfs_pool") and (real == mp or real.startswith(mp.rstrip("/") + "/")):
            return dict(data)
    return None


def release_or_keep(info: dict[str, Any], case: Case, mountpoint: str | Path,
                     members: list[dict[str, Any]] | None = None, *,
                     runner: SubprocessRunner | None = None) -> None:
    """Release after a failed mount (the pool members first); what could not be released stays
    recorded for ``mountpoint`` (:func:`record_state`) so that ``umount`` can finish the job."""
    problems: list[str] = []
    kept = []
    for m_info in members or []:
        trouble = release(m_info, case=case, runner=runner)
        if trouble:
            kept.append(m_info)
            problems += trouble
    problems += release(info, case=case, runner=runner)
    if problems:
        record_state(case, mountpoint, {**{k: info.get(k) for k in (
            "target", "loop_device", "backing_file", "set_readonly", "extra_loops",
            "dm_devices")}, "mountpoint": str(mountpoint), "device": info.get("device"),
            "failed_mount": True, "members": kept, "problems": problems})
