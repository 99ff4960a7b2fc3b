"""The storage wing's step outputs: what triage, image, copy, fs inspect, mount, umount,
locate, extract and device health record (``docs/step-outputs.md`` is generated from them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptrescue.model import JsonObject, StepOutputs, doc_field


@dataclass
class TriageOutput(StepOutputs):
    """What the ``triage`` step records (each field: docs/step-outputs.md)."""

    volume: str | None = doc_field(None, "The volume examined (None: every volume).")
    seconds: float = doc_field(0.0, "The write-rate window.")
    processes: list[JsonObject] = doc_field([],
        "Processes of interest: pid, kind, cmdline, open_for_write, write_rate_bps, ...")
    writers: list[int] = doc_field([], "Pids with files open for writing.")
    kernel_messages: list[JsonObject] = doc_field([], "Kernel-log lines of interest: kind, line.")
    checklist: list[str] = doc_field([], "The freeze checklist.")
    findings: list[JsonObject] = doc_field([], "The findings (JSON).")
    notes: list[str] = doc_field([], "Notes on what could not be examined.")


@dataclass
class ImageOutput(StepOutputs):
    """What the ``image`` step records (each field: docs/step-outputs.md)."""

    image: str = doc_field("", "The image file.")
    mapfile: str = doc_field("", "The ddrescue mapfile.")
    image_sha256: str = doc_field("", "SHA-256 of the image.")
    size: int = doc_field(0, "Size of the source in bytes.")
    rescued_bytes: int = doc_field(0, "Bytes read (the mapfile's '+' areas).")
    bad_ranges: list[list[int]] = doc_field([], "Unreadable [start, end) byte ranges.")

    @property
    def finished(self) -> bool:
        """Every byte of the source was read."""
        return bool(self.size) and self.rescued_bytes == self.size and not self.bad_ranges


@dataclass
class CopyOutput(StepOutputs):
    """What the ``copy`` step records (each field: docs/step-outputs.md)."""

    source: str = doc_field("", "The mounted filesystem copied.")
    dest: str = doc_field("", "The destination directory.")
    files: int = doc_field(0, "Files copied.")
    bytes: int = doc_field(0, "Bytes copied.")
    manifest_sha256: str = doc_field("", "SHA-256 of the manifest artifact.")
    verified: bool = doc_field(False, "The rsync -c -n verify pass found no difference.")
    differences: list[Any] = doc_field([], "What the verify pass found different.")
    unreadable: list[Any] = doc_field([], "Files that could not be read.")
    source_readonly: bool | None = doc_field(None, "The source was mounted read-only.")
    findings: list[JsonObject] = doc_field([], "The findings (JSON).")


@dataclass
class FsInspectOutput(StepOutputs):
    """What the ``fs.inspect`` step records (each field: docs/step-outputs.md)."""

    target: str = doc_field("", "The device or image inspected.")
    device: str | None = doc_field(None, "The node inspected (a partition, an LV, ...).")
    fstype: str | None = doc_field(None, "blkid TYPE of the filesystem.")
    facts: JsonObject = doc_field({}, "Filesystem facts (superblock, log state, ...).")
    health: JsonObject = doc_field({}, "SMART/NVMe health.")
    findings: list[JsonObject] = doc_field([], "The findings (JSON).")
    notes: list[str] = doc_field([], "Notes.")


@dataclass
class MountOutput(StepOutputs):
    """What the ``mount`` step records (each field: docs/step-outputs.md)."""

    mountpoint: str = doc_field("", "Where it is mounted.")
    device: str = doc_field("", "The node mounted (a partition when the image is partitioned).")
    fstype: str = doc_field("", "The filesystem type.")
    options: str = doc_field("", "The mount options.")
    target: str = doc_field("", "The image or device given.")
    loop_device: str | None = doc_field(None, "The read-only loop device attached.")
    datasets: list[JsonObject] = doc_field([], "ZFS datasets: dataset, mounted, mountpoint, reason.")
    findings: list[JsonObject] = doc_field([], "The findings (JSON).")


@dataclass
class UmountOutput(StepOutputs):
    """What the ``umount`` step records (each field: docs/step-outputs.md)."""

    loop_device: str | None = doc_field(None, "The loop device detached.")


@dataclass
class LocateOutput(StepOutputs):
    """What the ``locate`` step records (each field: docs/step-outputs.md)."""

    json_keys = ("ranges",)
    ranges: list[JsonObject] = doc_field([],
        "Unreadable ranges: start, end, files (path, file_offset, length, tensors).")
    unmapped: list[list[Any]] = doc_field([],
        "[start, end, why] of device ranges that could not be mapped (not in --json).")
    notes: list[str] = doc_field([], "Notes (not in --json).")


@dataclass
class ExtractOutput(StepOutputs):
    """What the ``extract`` step records (each field: docs/step-outputs.md)."""

    mountpoint: str = doc_field("", "The read-only mount.")
    to: str = doc_field("", "The recovery directory.")
    extracted: list[JsonObject] = doc_field([], "Copied checkpoints: checkpoint, format, files.")
    left_behind: list[JsonObject] = doc_field([], "Checkpoints not copied: checkpoint, verdict.")
    findings: list[JsonObject] = doc_field([], "The findings (JSON).")


@dataclass
class DeviceHealthOutput(StepOutputs):
    """What the ``device.health`` step records (each field: docs/step-outputs.md)."""

    target: str = doc_field("", "The device asked about.")
    device: bool = doc_field(False, "A block device (else skipped).")
    health: JsonObject = doc_field({}, "disk, smartctl (parsed -x -j), nvme_smart_log, nvme_error_log.")
