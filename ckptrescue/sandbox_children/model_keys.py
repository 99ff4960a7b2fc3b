"""Sandbox child: the state-dict names and shapes a named model class expects.

Run only through ``effects.sandbox.run_child("model_keys", request)`` (bubblewrap, seccomp,
audit hook: ``boundary.py``). The class is the responder's code, not evidence, but it is code
the kit did not write: it is imported and instantiated only here, after the boundary is armed.
Request keys: ``module`` (``pkg.models``), ``cls`` (``GPT``), ``path`` (a directory put first on
``sys.path``, bound read-only), ``kwargs`` (JSON keyword arguments). The model is built on
torch's ``meta`` device (no memory, no arithmetic) and ``state_dict(keep_vars=True)`` read:
names, shapes, and which names share one parameter (tied weights). Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ckptrescue.model import JsonObject
from ckptrescue.sandbox_children import boundary


def _keys(req: dict[str, Any]) -> dict[str, Any]:
    import importlib

    import torch

    if req.get("path"):
        sys.path.insert(0, req["path"])
    module = importlib.import_module(req["module"])
    cls = module
    for part in req["cls"].split("."):
        cls = getattr(cls, part)
    with torch.device("meta"):
        model = cls(**dict(req.get("kwargs") or {}))
    state = model.state_dict(keep_vars=True)
    ids: dict[int, str] = {}
    keys = []
    for name, value in state.items():
        first = ids.setdefault(id(value), name)
        keys.append({"name": name, "shape": list(value.shape),
                     "storage": first})  # tied names share the first name as their storage
    return {"ok": True, "keys": keys}


WARM = True  # a warm zygote may make these imports once and fork a child per load


def prepare(req: JsonObject) -> None:
    """The heavy imports, before the boundary closes (a warm zygote makes them before it
    forks)."""
    import torch  # noqa: F401
    import torch.nn  # noqa: F401


def main() -> None:
    req = boundary.start()
    prepare(req)

    boundary.enter(req)
    try:
        result = _keys(req)
    except BaseException as exc:  # noqa: BLE001 - every outcome is a result here
        result = boundary.failure(exc)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
