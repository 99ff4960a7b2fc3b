"""Parser for ``zpool status -j [--json-int] -vP`` (OpenZFS >= 2.3). Pure.

Gives the same :class:`zpool_status.PoolStatus` as the text parser: ``pools`` maps each pool name
to ``name``, ``state``, ``status``/``action`` (when the pool has a problem), ``scan_stats``,
``vdevs`` (nested: each vdev has ``vdev_type``, ``state``, ``read_errors``, ``write_errors``,
``checksum_errors`` — strings unless ``--json-int`` — and its own ``vdevs``; a missing device
has the vdev state's own name, e.g. ``CANT_OPEN`` where the text says ``UNAVAIL``, and ``was``),
``error_count``
and, with ``-v``, ``errlist`` (the damaged files). Tested against real outputs recorded on
OpenZFS 2.3 (fixtures/transcripts/zfs/).
"""

from __future__ import annotations

import json
from typing import Any

from ckptrescue.storage.parsers.zpool_status import PoolStatus, Vdev, count


def _n(value: Any) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, int):
        return value
    try:
        return count(str(value))
    except ValueError:
        return 0


def _walk(vdevs: Any, depth: int, out: list[Vdev]) -> None:
    if not isinstance(vdevs, dict):
        return
    for name, v in vdevs.items():
        if not isinstance(v, dict):
            continue
        out.append(Vdev(str(v.get("name", name)), str(v.get("state", "")),
                        _n(v.get("read_errors")), _n(v.get("write_errors")),
                        _n(v.get("checksum_errors")), depth,
                        f"was {v['was']}" if v.get("was") else str(v.get("aux", "") or "")))
        _walk(v.get("vdevs"), depth + 2, out)


def _scan(stats: Any) -> str:
    if not isinstance(stats, dict):
        return ""
    keys = ("function", "state", "start_time", "end_time", "errors")
    return ", ".join(f"{k}={stats[k]}" for k in keys if k in stats)


def _error_files(errors: Any) -> list[str]:
    if isinstance(errors, dict):
        out = []
        for key, val in errors.items():
            if isinstance(val, dict):
                out.append(str(val.get("path") or val.get("name") or key))
            else:
                out.append(str(key))
        return out
    if isinstance(errors, list):
        return [str(e.get("path", e)) if isinstance(e, dict) else str(e) for e in errors]
    return []


def parse(text: str) -> list[PoolStatus]:
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("pools"), dict):
        raise ValueError("not zpool status -j output (no 'pools' object)")
    out = []
    for name, p in data["pools"].items():
        if not isinstance(p, dict):
            continue
        ps = PoolStatus(pool=str(p.get("name", name)), state=str(p.get("state", "")),
                        status=str(p.get("status", "") or ""),
                        action=str(p.get("action", "") or ""), scan=_scan(p.get("scan_stats")))
        _walk(p.get("vdevs"), 0, ps.vdevs)
        ps.error_files = _error_files(p.get("errlist", p.get("errors")))
        ps.data_errors = _n(p.get("error_count")) if "error_count" in p else None
        if ps.error_files and (ps.data_errors or 0) < len(ps.error_files):
            ps.data_errors = len(ps.error_files)
        out.append(ps)
    return out
