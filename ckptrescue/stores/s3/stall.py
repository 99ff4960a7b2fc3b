"""Give up on a body that trickles: a server that sends a byte a second never trips the read
timeout (each ``recv`` returns in time) and would hold the kit for days on one object.

A watchdog thread beside each body read counts the bytes delivered; when fewer than
``MIN_BYTES`` arrive in any ``CKPTRESCUE_STALL_SECONDS`` (default 60) it shuts the connection's
socket down, which ends the blocked read at once. The reader then raises a
:class:`~ckptrescue.errors.RemoteError` naming the rate instead of resuming: a stalled server is
not retried (a reset is).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from types import TracebackType
from typing import Any

DEFAULT_WINDOW_S = 60.0
MIN_BYTES = 64 << 10  # per window: below ~1 KiB/s over a minute is a stall


def window_s() -> float:
    try:
        return max(1.0, float(os.environ.get("CKPTRESCUE_STALL_SECONDS", DEFAULT_WINDOW_S)))
    except ValueError:
        return DEFAULT_WINDOW_S


def socket_of(body: Any) -> socket.socket | None:
    """The socket under a botocore streaming body (urllib3's response and connection)."""
    raw = getattr(body, "_raw_stream", None)
    conn = getattr(raw, "_connection", None) or getattr(raw, "connection", None)
    sock = getattr(conn, "sock", None)
    return sock if isinstance(sock, socket.socket) else None


class StallGuard:
    """``with StallGuard() as guard: guard.watch(body); ... guard.moved(n)``; ``guard.stalled``
    says whether the guard cut the connection."""

    def __init__(self, window: float | None = None, min_bytes: int = MIN_BYTES) -> None:
        self.window = window_s() if window is None else window
        self.min_bytes = min_bytes
        self.stalled = False
        self._count = 0
        self._body: Any = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ckptrescue-stall", daemon=True)

    def __enter__(self) -> StallGuard:
        self._thread.start()
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def watch(self, body: Any) -> None:
        """The body now being read (a resumed read hands over its new body)."""
        with self._lock:
            self._body = body

    def moved(self, n: int) -> None:
        self._count += n

    def why(self) -> str:
        return (f"fewer than {self.min_bytes} bytes arrived in {self.window:g} s (the server "
                "trickles or stalled); given up, not resumed")

    def _run(self) -> None:
        mark, since = self._count, time.monotonic()
        while not self._done.wait(min(1.0, self.window / 4)):
            now = time.monotonic()
            if self._count - mark >= self.min_bytes:
                mark, since = self._count, now
            elif now - since >= self.window:
                self.stalled = True
                with self._lock:
                    sock = socket_of(self._body)
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
