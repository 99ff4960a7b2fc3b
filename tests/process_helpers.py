"""Process helpers the tests share."""

from __future__ import annotations

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
