"""inotify (via watchdog) for a local tree: the paths to check in the next targeted pass.

``ChangeCollector(root)`` starts an observer; ``wait(timeout)`` returns the relative paths
(bytes) created, modified, moved or deleted since the last call, after the first event plus a
short settle time (a file being written produces many events), or an empty list at timeout.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any


class ChangeCollector:
    SETTLE_S = 1.0

    def __init__(self, root: str) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        self.root = os.fsencode(os.path.realpath(root))
        self._changed: set[bytes] = set()
        self._event = threading.Event()
        self._lock = threading.Lock()
        collector = self

        class Handler(FileSystemEventHandler):  # type: ignore[misc]
            def on_any_event(self, event: Any) -> None:
                if event.is_directory or event.event_type in ("opened", "closed_no_write"):
                    return
                for attr in ("src_path", "dest_path"):
                    path = getattr(event, attr, None)
                    if path:
                        collector._add(os.fsencode(path))

        self.observer = Observer()
        self.observer.schedule(Handler(), os.fsdecode(self.root), recursive=True)
        self.observer.start()

    def _add(self, path: bytes) -> None:
        rel = os.path.relpath(path, self.root)
        if rel.startswith(b".."):
            return
        with self._lock:
            self._changed.add(rel)
        self._event.set()

    def wait(self, timeout: float) -> list[bytes]:
        if not self._event.wait(timeout):
            return []
        time.sleep(self.SETTLE_S)
        with self._lock:
            changed, self._changed = sorted(self._changed), set()
            self._event.clear()
        return changed

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=10)
