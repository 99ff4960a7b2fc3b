"""Process helpers the tests share."""

from __future__ import annotations

import gc
import time


def still_running(pids: list[int], timeout: float = 10) -> list[int]:
    """The processes of ``pids`` still running (not gone, not zombies) after up to ``timeout``
    seconds of waiting for them to end."""
    import psutil

    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.05)
    return alive


def collected(obj: object) -> bool:
    """``obj`` is in a generation that collection walks (a frozen object is in none)."""
    return any(o is obj for o in gc.get_objects())
