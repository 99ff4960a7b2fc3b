"""Parser for ``smartctl -x -j`` JSON (smartmontools >= 7.0). Pure.

``smartctl.exit_status`` is a bitmask (smartctl(8)): bit0 command line did not parse, bit1 device
open failed (or low-power mode), bit2 a SMART or other ATA command failed / checksum error,
bit3 SMART status "DISK FAILING", bit4 prefail attributes <= threshold, bit5 usage/prefail
attributes were <= threshold in the past, bit6 the error log has records, bit7 the self-test log
has errors. It is not a plain success/failure code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonObject

EXIT_BITS = {
    0: "command line did not parse",
    1: "device open failed or device in low-power mode",
    2: "a SMART or other device command failed, or a checksum error",
    3: "SMART status check returned DISK FAILING",
    4: "prefail attributes at or below threshold",
    5: "attributes were at or below threshold in the past",
    6: "device error log contains records of errors",
    7: "self-test log contains records of errors",
}
# ATA attributes whose raw value counts bad or at-risk sectors
SECTOR_ATTRS = {5: "Reallocated_Sector_Ct", 196: "Reallocated_Event_Count",
                197: "Current_Pending_Sector", 198: "Offline_Uncorrectable"}


def decode_exit(status: int) -> list[str]:
    return [text for bit, text in EXIT_BITS.items() if status & (1 << bit)]


@dataclass
class SmartReport:
    device: str | None
    protocol: str | None
    model: str | None
    serial: str | None
    exit_status: int
    exit_meaning: list[str]
    passed: bool | None
    messages: list[str] = field(default_factory=list)
    sector_counts: dict[str, int] = field(default_factory=dict)
    failing_attributes: list[str] = field(default_factory=list)
    error_log_count: int | None = None
    self_test_errors: int | None = None
    nvme_health: dict[str, Any] | None = None

    def to_json(self) -> JsonObject:
        return dict(self.__dict__)


def parse(text: str) -> SmartReport:
    data = json.loads(text)
    sm = data.get("smartctl", {})
    status = int(sm.get("exit_status", 0))
    dev = data.get("device", {})
    rep = SmartReport(
        device=dev.get("name"), protocol=dev.get("protocol"), model=data.get("model_name"),
        serial=data.get("serial_number"), exit_status=status, exit_meaning=decode_exit(status),
        passed=data.get("smart_status", {}).get("passed"),
        messages=[m.get("string", "") for m in sm.get("messages", [])],
    )
    for attr in data.get("ata_smart_attributes", {}).get("table", []):
        if attr.get("id") in SECTOR_ATTRS:
            rep.sector_counts[attr.get("name") or SECTOR_ATTRS[attr["id"]]] = int(
                attr.get("raw", {}).get("value", 0))
        if attr.get("when_failed") in {"now", "past"}:
            rep.failing_attributes.append(f"{attr.get('name')} ({attr['when_failed']})")
    elog = data.get("ata_smart_error_log", {})
    for key in ("extended", "summary"):
        if key in elog:
            rep.error_log_count = int(elog[key].get("count", 0))
            break
    st = data.get("ata_smart_self_test_log", {})
    for key in ("extended", "standard"):
        if key in st:
            rep.self_test_errors = int(st[key].get("error_count_total", 0))
            break
    if "nvme_smart_health_information_log" in data:
        rep.nvme_health = dict(data["nvme_smart_health_information_log"])
    return rep
