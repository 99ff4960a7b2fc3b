"""NVMe health: ``nvme smart-log -o json`` (nvme-cli) or the ``nvme_smart_health_information_log``
of ``smartctl -j`` — same SMART/Health log page, different key names. Pure.

``critical_warning`` bits (NVMe base spec; libnvme ``enum nvme_smart_crit``): 0 spare below
threshold, 1 temperature, 2 reliability degraded, 3 media read-only, 4 volatile backup failed,
5 persistent memory region read-only. Bits are current state: record at first contact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptrescue.model import JsonObject

CRIT_BITS = {0: "available spare below threshold", 1: "temperature out of range",
             2: "NVM subsystem reliability degraded", 3: "media placed in read-only mode",
             4: "volatile memory backup failed", 5: "persistent memory region read-only"}
# nvme-cli key -> smartctl key
_ALIASES = {"avail_spare": "available_spare", "spare_thresh": "available_spare_threshold",
            "percent_used": "percentage_used"}


@dataclass
class NvmeHealth:
    critical_warning: int
    critical_meaning: list[str]
    available_spare: int | None
    spare_threshold: int | None
    percentage_used: int | None
    media_errors: int
    error_log_entries: int
    unsafe_shutdowns: int | None

    def to_json(self) -> JsonObject:
        return dict(self.__dict__)


def _get(data: JsonObject, key: str) -> Any:
    if key in data:
        return data[key]
    for alias, canonical in _ALIASES.items():
        if canonical == key and alias in data:
            return data[alias]
    return None


def parse_health(data: JsonObject) -> NvmeHealth:
    crit = data.get("critical_warning", 0)
    if isinstance(crit, dict):  # some nvme-cli versions nest {"value": N, ...}
        crit = crit.get("value", 0)
    crit = int(crit)
    return NvmeHealth(
        critical_warning=crit,
        critical_meaning=[t for b, t in CRIT_BITS.items() if crit & (1 << b)],
        available_spare=_int(_get(data, "available_spare")),
        spare_threshold=_int(_get(data, "available_spare_threshold")),
        percentage_used=_int(_get(data, "percentage_used")),
        media_errors=_int(data.get("media_errors")) or 0,
        error_log_entries=_int(data.get("num_err_log_entries")) or 0,
        unsafe_shutdowns=_int(data.get("unsafe_shutdowns")),
    )


def _int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.rstrip("%").replace(",", "")
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# Status Code Type 2: media and data integrity errors (NVMe base spec, Generic/Media status)
MEDIA_STATUS = {0x80: "write fault", 0x81: "unrecovered read error",
                0x82: "end-to-end guard check error", 0x83: "end-to-end application tag check "
                "error", 0x84: "end-to-end reference tag check error", 0x85: "compare failure",
                0x86: "access denied", 0x87: "deallocated or unwritten logical block"}
STATUS_TYPES = {0: "generic", 1: "command specific", 2: "media and data integrity",
                3: "path related", 7: "vendor specific"}


@dataclass
class NvmeErrorEntry:
    """One Error Information Log entry (``nvme error-log -o json``: ``status_field`` is the
    status without the phase tag, i.e. SC bits 7:0, SCT bits 10:8, M bit 13, DNR bit 14)."""

    error_count: int
    sqid: int
    cmdid: int
    status_field: int
    lba: int
    nsid: int

    @property
    def status_code(self) -> int:
        return self.status_field & 0xFF

    @property
    def status_type(self) -> int:
        return (self.status_field >> 8) & 0x7

    @property
    def is_media_error(self) -> bool:
        return self.status_type == 2

    def describe(self) -> str:
        sct = STATUS_TYPES.get(self.status_type, f"type {self.status_type}")
        text = (MEDIA_STATUS.get(self.status_code, f"status 0x{self.status_code:02x}")
                if self.is_media_error else f"status 0x{self.status_code:02x}")
        queue = "admin queue" if self.sqid == 0 else f"I/O queue {self.sqid}"
        where = f" at LBA {self.lba} (nsid {self.nsid})" if self.is_media_error else ""
        return f"#{self.error_count}: {sct}: {text} on {queue}{where}"

    def to_json(self) -> JsonObject:
        return {**self.__dict__, "status_type": self.status_type, "status_code": self.status_code,
                "media_error": self.is_media_error, "text": self.describe()}


def parse_error_log(data: JsonObject) -> list[NvmeErrorEntry]:
    """The entries that hold an error (``error_count`` > 0), newest first as the drive keeps
    them. Unused slots of the log are all zero and dropped."""
    out = []
    for e in data.get("errors") or []:
        if not isinstance(e, dict):
            continue
        e = {k.lower(): v for k, v in e.items()}  # some nvme-cli releases print "NSID"
        count = _int(e.get("error_count")) or 0
        if count <= 0:
            continue
        status = _int(e.get("status_field")) or 0
        if "phase_tag" not in e:  # nvme-cli 1.x: the raw field, phase tag in bit 0
            status >>= 1
        out.append(NvmeErrorEntry(error_count=count, sqid=_int(e.get("sqid")) or 0,
                                  cmdid=_int(e.get("cmdid")) or 0, status_field=status,
                                  lba=_int(e.get("lba")) or 0, nsid=_int(e.get("nsid")) or 0))
    return out
