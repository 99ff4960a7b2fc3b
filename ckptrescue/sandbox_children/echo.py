"""A trivial child used by the sandbox's own tests: echoes, allocates, sleeps or crashes."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    with open(sys.argv[1]) as fh:
        req = json.load(fh)
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
    print(json.dumps({"ok": True, "echo": req}))


if __name__ == "__main__":
    main()
