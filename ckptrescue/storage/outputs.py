"""The storage wing's step outputs: what triage, image, copy, fs inspect, mount, umount,
locate, extract and device health record (``docs/step-outputs.md`` is generated from them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonObject, StepOutputs, doc


@dataclass
class TriageOutput(StepOutputs):
    volume: str | None = field(default=None, metadata=doc(
        "The volume examined (None: every volume)."))
    seconds: float = field(default=0.0, metadata=doc("The write-rate window."))
    processes: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Processes of interest: pid, kind, cmdline, open_for_write, write_rate_bps, ..."))
    writers: list[int] = field(default_factory=list, metadata=doc(
        "Pids with files open for writing."))
    kernel_messages: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Kernel-log lines of interest: kind, line."))
    checklist: list[str] = field(default_factory=list, metadata=doc("The freeze checklist."))
    findings: list[JsonObject] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))
    notes: list[str] = field(default_factory=list, metadata=doc(
        "Notes on what could not be examined."))


@dataclass
class ImageOutput(StepOutputs):
    image: str = field(default="", metadata=doc("The image file."))
    mapfile: str = field(default="", metadata=doc("The ddrescue mapfile."))
    image_sha256: str = field(default="", metadata=doc("SHA-256 of the image."))
    size: int = field(default=0, metadata=doc("Size of the source in bytes."))
    rescued_bytes: int = field(default=0, metadata=doc("Bytes read (the mapfile's '+' areas)."))
    bad_ranges: list[list[int]] = field(default_factory=list, metadata=doc(
        "Unreadable [start, end) byte ranges."))

    @property
    def finished(self) -> bool:
        """Every byte of the source was read."""
        return bool(self.size) and self.rescued_bytes == self.size and not self.bad_ranges


@dataclass
class CopyOutput(StepOutputs):
    source: str = field(default="", metadata=doc("The mounted filesystem copied."))
    dest: str = field(default="", metadata=doc("The destination directory."))
    files: int = field(default=0, metadata=doc("Files copied."))
    bytes: int = field(default=0, metadata=doc("Bytes copied."))
    manifest_sha256: str = field(default="", metadata=doc("SHA-256 of the manifest artifact."))
    verified: bool = field(default=False, metadata=doc(
        "The rsync -c -n verify pass found no difference."))
    differences: list[Any] = field(default_factory=list, metadata=doc(
        "What the verify pass found different."))
    unreadable: list[Any] = field(default_factory=list, metadata=doc(
        "Files that could not be read."))
    source_readonly: bool | None = field(default=None, metadata=doc(
        "The source was mounted read-only."))
    findings: list[JsonObject] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))


@dataclass
class FsInspectOutput(StepOutputs):
    target: str = field(default="", metadata=doc("The device or image inspected."))
    device: str | None = field(default=None, metadata=doc(
        "The node inspected (a partition, an LV, ...)."))
    fstype: str | None = field(default=None, metadata=doc("blkid TYPE of the filesystem."))
    facts: JsonObject = field(default_factory=dict, metadata=doc(
        "Filesystem facts (superblock, log state, ...)."))
    health: JsonObject = field(default_factory=dict, metadata=doc("SMART/NVMe health."))
    findings: list[JsonObject] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))
    notes: list[str] = field(default_factory=list, metadata=doc("Notes."))


@dataclass
class MountOutput(StepOutputs):
    mountpoint: str = field(default="", metadata=doc("Where it is mounted."))
    device: str = field(default="", metadata=doc(
        "The node mounted (a partition when the image is partitioned)."))
    fstype: str = field(default="", metadata=doc("The filesystem type."))
    options: str = field(default="", metadata=doc("The mount options."))
    target: str = field(default="", metadata=doc("The image or device given."))
    loop_device: str | None = field(default=None, metadata=doc(
        "The read-only loop device attached."))
    datasets: list[JsonObject] = field(default_factory=list, metadata=doc(
        "ZFS datasets: dataset, mounted, mountpoint, reason."))
    findings: list[JsonObject] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))


@dataclass
class UmountOutput(StepOutputs):
    loop_device: str | None = field(default=None, metadata=doc("The loop device detached."))


@dataclass
class LocateOutput(StepOutputs):
    json_keys = ("ranges",)
    ranges: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Unreadable ranges: start, end, files (path, file_offset, length, tensors)."))
    unmapped: list[list[Any]] = field(default_factory=list, metadata=doc(
        "[start, end, why] of device ranges that could not be mapped (not in --json)."))
    notes: list[str] = field(default_factory=list, metadata=doc("Notes (not in --json)."))


@dataclass
class ExtractOutput(StepOutputs):
    mountpoint: str = field(default="", metadata=doc("The read-only mount."))
    to: str = field(default="", metadata=doc("The recovery directory."))
    extracted: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Copied checkpoints: checkpoint, format, files."))
    left_behind: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Checkpoints not copied: checkpoint, verdict."))
    findings: list[JsonObject] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))


@dataclass
class DeviceHealthOutput(StepOutputs):
    target: str = field(default="", metadata=doc("The device asked about."))
    device: bool = field(default=False, metadata=doc("A block device (else skipped)."))
    health: JsonObject = field(default_factory=dict, metadata=doc(
        "disk, smartctl (parsed -x -j), nvme_smart_log, nvme_error_log."))
