"""Checkpoints in an object store, probed where they live: ``in_place(paths)`` mounts a
read-only view (``stores.view.open_view``: ranged GETs behind a FUSE view) for each
``s3://`` / ``az://`` / ``gs://`` path, hands probe/rank the local view paths, names the
reports back by their store URLs (with the version read), and returns the accounting —
bytes of how many objects were read, requests — as ``store.read`` audit records."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import AuditEvent


@dataclass
class Views:
    opened: list[Any] = field(default_factory=list)

    def _url(self, path: str) -> str:
        for view in self.opened:
            root = str(view.mountpoint)
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return str(view.url_of(path))
        return path

    def accounting(self) -> list[AuditEvent]:
        return self._accounting()

    def _accounting(self) -> list[AuditEvent]:
        return [AuditEvent("store.read", {"url": view.url, **view.settle()})
                for view in self.opened]

    def close(self, reports: list[Any]) -> list[AuditEvent]:
        """Reports named by their store URLs; the read accounting."""
        for r in reports:
            r.path = self._url(r.path)
            r.files = [self._url(f) for f in r.files]
            for rec in r.tensors:
                if rec.file:
                    rec.file = self._url(rec.file)
            for f in r.findings:
                if f.evidence:
                    object.__setattr__(f, "evidence", self._url(f.evidence))
        return self._accounting()

    def close_rank(self, result: Any) -> list[AuditEvent]:
        for c in result.checkpoints:
            c.path = self._url(c.path)
            self.close(c.reports)
        if result.resume_from:
            result.resume_from = self._url(result.resume_from)
        return self._accounting()


@contextmanager
def in_place(paths: list[str], endpoint_url: str | None = None
             ) -> Iterator[tuple[list[str], Views]]:
    from ckptrescue.stores.urls import is_store_url

    views = Views()
    if not any(is_store_url(str(p)) for p in paths):
        yield [str(p) for p in paths], views
        return
    from ckptrescue.stores.base import StoreOptions
    from ckptrescue.stores.view import open_view

    local: list[str] = []
    with ExitStack() as stack:
        for p in paths:
            if is_store_url(str(p)):
                view = stack.enter_context(open_view(str(p), options=StoreOptions(
                    endpoint_url=endpoint_url)))
                views.opened.append(view)
                local.append(str(view.path))
            else:
                local.append(str(p))
        yield local, views
