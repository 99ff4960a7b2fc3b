"""``probe --load`` checks more than that the load succeeded: the loaded tensors against the map.

The sandbox child describes every tensor the real loader returned (``sandbox_children/
torch_load.py: tensor_map``: dtype, shape, SHA-256 prefix of its C-order bytes, named as the
static map names them). :func:`compare` checks each tensor both sides name: the dtype and shape
the static reader found, and the bytes salvage would write for it (``salvage.tensor_digest``),
for tensors whose bytes the static checks verified. A difference means the static map is not
what the loader builds (a storage read as another type, a view torch rebuilds otherwise): the
verdict cannot be ``intact`` (LD008).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import CheckpointReport
from ckptrescue.model import JsonObject

_VERIFIED = ("ok", "unverified", "suspect")


def _format(name: str) -> Any:
    from ckptrescue.checkpoints.probes.checkpoints import formats

    return next((f for f in formats() if getattr(f, "name", None) == name), None)


def _as_loaded(dtype: str | None, shape: tuple[int, ...] | None
               ) -> tuple[str | None, tuple[int, ...] | None]:
    """How the loader presents a static dtype: safetensors' ``F4`` (two values a byte) is
    torch's ``float4_e2m1fn_x2`` with the last dimension halved (``safetensors/torch.py``)."""
    if dtype == "F4" and shape and shape[-1] % 2 == 0:
        return "float4_e2m1fn_x2", (*shape[:-1], shape[-1] // 2)
    return dtype, shape


def compare(report: CheckpointReport, loaded: dict[str, list[Any]]) -> JsonObject:
    """``{"compared", "mismatches": [{"name", "what", "static", "loaded"}], "static_only",
    "loaded_only"}`` for the tensors named on both sides."""
    from ckptrescue.checkpoints.salvage import tensor_digest

    fmt = _format(report.format)
    reader = getattr(fmt, "read_tensor_bytes", None)
    root = Path(report.path)
    static = {t.name: t for t in report.tensors}
    common = sorted(set(static) & set(loaded))
    mismatches: list[dict[str, Any]] = []
    for name in common:
        rec = static[name]
        dtype, shape, digest = loaded[name][:3]
        sdtype, sshape = _as_loaded(rec.dtype, rec.shape)
        if sdtype is not None and sdtype != dtype:
            mismatches.append({"name": name, "what": "dtype", "static": rec.dtype,
                               "loaded": dtype})
        elif sshape is not None and list(sshape) != list(shape):
            mismatches.append({"name": name, "what": "shape", "static": list(sshape),
                               "loaded": list(shape)})
        elif rec.status in _VERIFIED:
            mine = tensor_digest(rec, report, root, reader=reader)
            if mine is not None and mine != digest:
                mismatches.append({"name": name, "what": "bytes", "static": mine,
                                   "loaded": digest})
    return {"compared": len(common), "mismatches": mismatches,
            "static_only": len(set(static) - set(loaded)),
            "loaded_only": len(set(loaded) - set(static))}
