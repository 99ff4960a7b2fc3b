"""NVMe health: ``nvme smart-log -o json`` (nvme-cli) or the ``nvme_smart_health_information_log``
of ``smartctl -j`` — same SMART/Health log page, different key names. Pure.

``critical_warning`` bits (NVMe base spec; libnvme ``enum nvme_smart_crit``): 0 spare below
threshold, 1 temperature, 2 reliability degraded, 3 media read-only, 4 volatile backup failed,
5 persistent memory region read-only. Bits are current state: record at first contact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _get(data: dict[str, Any], key: str) -> Any:
    if key in data:
        return data[key]
    for alias, canonical in _ALIASES.items():
        if canonical == key and alias in data:
            return data[alias]
    return None


def parse_health(data: dict[str, Any]) -> NvmeHealth:
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
