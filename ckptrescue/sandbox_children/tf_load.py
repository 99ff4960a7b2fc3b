"""Sandboxed TensorFlow reader: list and read every variable of each TensorBundle prefix.

Run only through :func:`ckptrescue.effects.sandbox.run_child` (resource limits, timeout, no
credentials). One child serves every TensorFlow checkpoint of a run (the import is slow).

Request: ``{"prefixes": [PREFIX, ...], "max_errors": 50}``. Output (one JSON line)::

    {"ok": true, "tensorflow": "2.21.0",
     "results": {PREFIX: {"list_ok": bool, "list_error": {"type", "message"} | null,
                          "variables": N, "read_ok": N,
                          "errors": [{"name", "type", "message"}], "seconds": S}}}

Progress lines ``ckptrescue-tf-load: BEGIN <prefix>`` go to stderr, so that when TensorFlow's
C++ code aborts the process (a CHECK failure on an inconsistent slice entry) the parent can tell
which checkpoint killed it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _err(exc: BaseException) -> dict[str, str]:
    message = getattr(exc, "message", None) or str(exc)
    return {"type": type(exc).__name__, "message": str(message)[:2000]}


def _probe_prefix(tf: Any, prefix: str, max_errors: int) -> dict[str, Any]:
    start = time.monotonic()
    out: dict[str, Any] = {"list_ok": False, "list_error": None, "variables": 0, "read_ok": 0,
                           "errors": []}
    try:
        names = [n for n, _shape in tf.train.list_variables(prefix)]
        out["list_ok"] = True
    except Exception as exc:  # noqa: BLE001 - TF's own error text is the result
        out["list_error"] = _err(exc)
        names = []
    out["variables"] = len(names)
    if names:
        try:
            reader = tf.train.load_checkpoint(prefix)
        except Exception as exc:  # noqa: BLE001
            out["errors"].append({"name": None, **_err(exc)})
            reader = None
        for name in names if reader is not None else []:
            try:
                value = reader.get_tensor(name)
                del value
                out["read_ok"] += 1
            except Exception as exc:  # noqa: BLE001
                if len(out["errors"]) < max_errors:
                    out["errors"].append({"name": name, **_err(exc)})
    out["seconds"] = round(time.monotonic() - start, 3)
    return out


def main() -> None:
    with open(sys.argv[1]) as fh:
        req = json.load(fh)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    results = {}
    for prefix in req.get("prefixes", []):
        print(f"ckptrescue-tf-load: BEGIN {prefix}", file=sys.stderr, flush=True)
        results[prefix] = _probe_prefix(tf, prefix, int(req.get("max_errors", 50)))
        print(f"ckptrescue-tf-load: END {prefix}", file=sys.stderr, flush=True)
    print(json.dumps({"ok": True, "tensorflow": tf.__version__, "results": results}))


if __name__ == "__main__":
    main()
