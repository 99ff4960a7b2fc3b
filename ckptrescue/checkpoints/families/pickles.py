"""Reading a rank file's own metadata statically: the ``data.pkl`` of a torch zip, scanned by
``formats/pickle_scan.py`` (nothing imported, nothing called), turned into plain values.

``plain(root)`` maps the inert graph to JSON-like data: dicts, lists, numbers, strings;
an ``argparse.Namespace`` (or any NEWOBJ+BUILD object) becomes a dict of its state with
``"__class__"``; an enum looked up by value becomes ``{"__class__", "value"}``; a tensor becomes
``{"__tensor__": dtype, "shape": [...]}``; a bare global its qualified name. Bounded in depth
and size: a hostile pickle cannot make it expensive.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import CheckpointReport
from ckptrescue.checkpoints.formats import pickle_roots, pickle_scan
from ckptrescue.checkpoints.formats.regular_file import open_regular

MAX_PKL = 64 * 1024 * 1024
_MAX_DEPTH = 12
_MAX_ITEMS = 20_000


def data_pkl_root(path: Path, report: CheckpointReport) -> Any:
    """The scanned root object of a torch zip's ``data.pkl`` (None when it cannot be read)."""
    records = report.extra.get("records") or []
    rec = next((r for r in records if str(r.get("name", "")).endswith("data.pkl")), None)
    if rec is None or rec.get("data_offset") is None or not rec.get("length"):
        return None
    if rec["length"] > MAX_PKL:
        return None
    try:
        with open_regular(path) as fh:
            fh.seek(rec["data_offset"])
            blob = fh.read(rec["length"])
        return pickle_roots.plain_root(blob, rec["data_offset"])
    except (OSError, pickle_scan.PickleError, ValueError):
        return None


class _Budget:
    def __init__(self) -> None:
        self.left = _MAX_ITEMS


def plain(obj: Any, depth: int = 0, budget: _Budget | None = None) -> Any:  # noqa: C901
    """The inert object graph as plain data (see module docstring)."""
    budget = budget or _Budget()
    budget.left -= 1
    if budget.left < 0 or depth > _MAX_DEPTH:
        return "<...>"
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, pickle_scan.TensorRef):
        return {"__tensor__": obj.dtype, "shape": list(obj.size)}
    if isinstance(obj, pickle_scan.PersistentRef):
        return {"__storage__": obj.key if obj.is_storage else "?"}
    if isinstance(obj, pickle_scan.Global):
        return obj.qualname
    if isinstance(obj, dict):
        out = {}
        for k, v in list(obj.items())[:budget.left if budget.left > 0 else 0]:
            key = k if isinstance(k, (str, int, float, bool)) or k is None else str(plain(
                k, depth + 1, budget))
            out[key] = plain(v, depth + 1, budget)
        return out
    if isinstance(obj, (list, tuple)):
        return [plain(v, depth + 1, budget) for v in list(obj)[:max(budget.left, 0)]]
    if isinstance(obj, pickle_scan.Call):
        out = {"__class__": obj.qualname}
        state = obj.merged_state
        if isinstance(state, dict):
            for k, v in state.items():
                out[str(k)] = plain(v, depth + 1, budget)
        elif obj.args and len(obj.args) == 1 and not isinstance(obj.args[0], (dict, list)):
            out["value"] = plain(obj.args[0], depth + 1, budget)  # Enum(value), Class(x)
        elif obj.args:
            out["args"] = plain(list(obj.args), depth + 1, budget)
        if obj.items:
            out["items"] = plain(obj.items, depth + 1, budget)
        return out
    return repr(obj)[:200]


def top_level(root: Any, keys: tuple[str, ...] = (), *, skip: tuple[str, ...] = ()) -> dict:
    """The root dict's entries (all, or only ``keys``) as plain data, leaving out ``skip``
    (the large tensor maps: ``module``, ``model``, ``optimizer_state_dict``)."""
    if not isinstance(root, dict):
        return {}
    out: dict[str, Any] = {}
    for k, v in root.items():
        if not isinstance(k, str) or (keys and k not in keys) or k in skip:
            continue
        out[k] = plain(v)
    return out


def as_int(value: Any) -> int | None:
    """An int from plain data (``{"value": n}`` of an int-like wrapper too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict) and isinstance(value.get("value"), int):
        return value["value"]
    return None


def zip_pickle_root(path: Path) -> Any:
    """The scanned ``data.pkl`` root of a torch zip read straight from its central directory
    (for a family's layout, before the member's own probe); None when it cannot be read."""
    import struct

    from ckptrescue.checkpoints.formats import zipwalk

    try:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            layout = zipwalk.read_central(fh, 0, size)
            if layout is None:
                return None
            rec = next((r for r in layout.records if r.name.endswith("data.pkl")), None)
            if rec is None or not rec.compressed_size or rec.compressed_size > MAX_PKL \
                    or rec.method != 0:
                return None
            offset = rec.data_offset
            if offset is None:
                fh.seek(rec.header_offset)
                head = fh.read(30)
                if len(head) < 30 or head[:4] != b"PK\x03\x04":
                    return None
                nlen, xlen = struct.unpack("<HH", head[26:30])
                offset = rec.header_offset + 30 + nlen + xlen
            fh.seek(offset)
            blob = fh.read(rec.compressed_size)
        return pickle_roots.plain_root(blob, offset)
    except (OSError, ValueError, pickle_scan.PickleError, struct.error):
        return None


def scalar_value(path: Path, offset: int | None, dtype: str | None) -> float | int | None:
    """A 0-d tensor's value read from its bytes (an optimizer ``step``): float32/64, int32/64."""
    fmt = {"float32": "<f", "float64": "<d", "int64": "<q", "int32": "<i"}.get(dtype or "")
    if fmt is None or offset is None:
        return None
    import struct

    try:
        with open_regular(path) as fh:
            fh.seek(offset)
            raw = fh.read(struct.calcsize(fmt))
        value = struct.unpack(fmt, raw)[0]
    except (OSError, struct.error):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
