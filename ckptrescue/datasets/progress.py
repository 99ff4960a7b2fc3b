"""Progress values reported by long dataset operations (rendered by the CLI on stderr)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """How far a build or audit is: files and bytes done of the totals, and the time spent."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Bytes per second so far."""
        return self.bytes_done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        if self.rate <= 0:
            return None
        return max(self.bytes_total - self.bytes_done, 0) / self.rate


ProgressFn = Callable[[Progress], None]


class Tracker:
    """Thread-safe counters; calls ``callback`` at most every ``interval_s`` (and at the end)."""

    def __init__(self, files_total: int, bytes_total: int, callback: ProgressFn | None,
                 *, interval_s: float = 0.25, cancel: threading.Event | None = None) -> None:
        self.cancel = cancel  # set: the next count raises KeyboardInterrupt (the work stops)
        self.files_total = files_total
        self.bytes_total = bytes_total
        self.files_done = 0
        self.bytes_done = 0
        self.callback = callback
        self.interval_s = interval_s
        self.start = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()

    def add(self, *, files: int = 0, nbytes: int = 0) -> None:
        """Count work done; called from worker threads too (the callback runs under the lock,
        so a progress printer is never entered twice at once)."""
        if self.cancel is not None and self.cancel.is_set():
            raise KeyboardInterrupt("cancelled")
        with self._lock:
            self.files_done += files
            self.bytes_done += nbytes
            if self.callback is None:
                return
            now = time.monotonic()
            if now - self._last >= self.interval_s:
                self._last = now
                self.callback(self.snapshot())

    def snapshot(self) -> Progress:
        return Progress(self.files_done, self.files_total, self.bytes_done, self.bytes_total,
                        time.monotonic() - self.start)

    def finish(self) -> None:
        if self.callback is not None:
            with self._lock:
                self.callback(self.snapshot())
