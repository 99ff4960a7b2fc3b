"""A trivial child used by the sandbox's own tests: echoes, allocates, sleeps or crashes, and
tries what a payload would (write, read, run a program, connect) to show the boundary holds."""

from __future__ import annotations

import gc
import importlib
import json
import os
import time
from typing import Any

from ckptrescue.sandbox_children import boundary


def _try(req: dict[str, Any]) -> dict[str, Any]:
    """One forbidden (or allowed) operation; the result says whether it worked."""
    action = req["action"]
    try:
        if action == "write":
            with open(req["path"], "w") as fh:
                fh.write("written from the sandbox")
        elif action == "read":
            with open(req["path"]) as fh:
                return {"ok": True, "worked": True, "data": fh.read(100)}
        elif action == "listdir":
            return {"ok": True, "worked": True, "entries": sorted(os.listdir(req["path"]))}
        elif action == "system":
            return {"ok": True, "worked": True, "status": os.system(req["command"])}  # noqa: S605
        elif action == "exec":
            os.execv(req["argv"][0], req["argv"])  # noqa: S606
        elif action == "userns":  # what a payload past hook and filter would try
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
        elif action == "connect":
            import socket

            with socket.create_connection(("127.0.0.1", int(req["port"])), timeout=5):
                pass
        elif action == "status":
            with open("/proc/self/status") as fh:
                return {"ok": True, "worked": True, "status": fh.read(),
                        "collection": {"enabled": gc.isenabled(),
                                       "frozen": gc.get_freeze_count()}}
    except OSError as exc:
        return {"ok": True, "worked": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "worked": True}


# the sandbox's tests run it warm, as the loaders run; it has no ``prepare``: its ``preload``
# is imported by each child (between ``start`` and ``enter``), never by the zygote
WARM = True


def main() -> None:
    req = boundary.start()
    for module in req.get("preload", []):  # as a loader imports its library: before entering
        importlib.import_module(module)
    boundary.enter(req)
    action = req.get("action", "echo")
    if action == "allocate":
        blob = bytearray(int(req["mb"]) * 1024 * 1024)
        print(json.dumps({"ok": True, "allocated": len(blob)}))
        return
    if action == "sleep":
        time.sleep(float(req["seconds"]))
    if action == "abort":
        os.abort()
    if action == "raise":
        raise ValueError("boom")
    if action in ("write", "read", "listdir", "system", "exec", "connect", "status", "userns"):
        print(json.dumps(_try(req)))
        return
    print(json.dumps({"ok": True, "echo": req}))


if __name__ == "__main__":
    main()
