"""The quarantine list (pure): built from audit/verify results, saved, loaded, consulted.

JSON shape (``schema: "ckptrescue.datasets.quarantine/1"``)::

    {"schema": "ckptrescue.datasets.quarantine/1", "root": "/data/train",
     "files":   [{"path": "shard-00017.tfrecord", "reason": "corrupted"}],
     "records": [{"path": "shard-00003.tar", "index": 41, "key": "000041", "offset": 420352,
                  "reason": "member truncated"}],
     "sources": ["manifest audit", "dataset verify"]}

A damaged tar member that names no sample key (a torn header, a truncated end) quarantines the
whole shard: a streaming tar reader stops there. Paths are relative to ``root`` with ``/``
separators (names that are not UTF-8 keep their bytes as surrogate escapes, as everywhere in
the kit's JSON). ``keep(path, index=, key=)`` answers for one file or record: ``path`` may be
relative to the root or absolute under it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.model import JsonObject

SCHEMA = "ckptrescue.datasets.quarantine/1"
FILE_STATUSES = ("corrupted", "changed", "missing", "unreadable")  # audit: the whole file is bad


@dataclass(frozen=True)
class QuarantinedRecord:
    path: str
    index: int | None
    key: str | None
    offset: int | None
    reason: str

    def to_json(self) -> JsonObject:
        return {"path": self.path, "index": self.index, "key": self.key, "offset": self.offset,
                "reason": self.reason}


@dataclass
class Quarantine:
    root: str
    files: dict[str, str] = field(default_factory=dict)  # path -> reason
    records: list[QuarantinedRecord] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        self._by_index: dict[str, set[int]] = {}
        self._by_key: dict[str, set[str]] = {}
        self._record_files: set[str] = set()
        for r in self.records:
            self._record_files.add(r.path)
            if r.index is not None:
                self._by_index.setdefault(r.path, set()).add(r.index)
            if r.key is not None:
                self._by_key.setdefault(r.path, set()).add(r.key)

    # -- building ---------------------------------------------------------------------------
    def add_file(self, path: str, reason: str) -> None:
        self.files.setdefault(_norm(path), reason)

    def add_record(self, path: str, *, index: int | None, key: str | None,
                   offset: int | None, reason: str) -> None:
        rec = QuarantinedRecord(_norm(path), index, key, offset, reason)
        if index is None and key is None:  # a record nobody can name: the whole file goes
            self.add_file(rec.path, reason)
            return
        self.records.append(rec)
        self._index()

    def add_audit(self, audit: dict[str, Any]) -> None:
        """``manifest audit --json`` output (or ``AuditResult.to_json()``)."""
        for row in audit.get("files", []):
            if row.get("status") in FILE_STATUSES:
                self.add_file(row["path"], str(row["status"]))
        self.sources.append("manifest audit")

    def add_verify(self, verify: dict[str, Any]) -> None:
        """``dataset verify --json`` output: unreadable files whole, damaged ones by record."""
        for row in verify.get("files", []):
            status = row.get("status")
            if status == "unreadable":
                self.add_file(row["path"], "unreadable")
            elif status == "damaged":
                bad = row.get("bad_records") or []
                if not bad:
                    self.add_file(row["path"], "damaged")
                for b in bad:
                    if str(row.get("format", "")).startswith("tar") and not b.get("key"):
                        # a tar member that names no sample (a torn header, a truncated end)
                        # stops a streaming tar reader: the shard goes whole
                        self.add_file(row["path"], str(b.get("problem", "damaged")))
                        continue
                    self.add_record(row["path"], index=b.get("index"), key=b.get("key"),
                                    offset=b.get("offset"), reason=str(b.get("problem", "")))
        self.sources.append("dataset verify")

    # -- consulting -------------------------------------------------------------------------
    def relative(self, path: str | os.PathLike[str]) -> str:
        text = os.fspath(path)
        if os.path.isabs(text) and self.root:
            rel = os.path.relpath(text, self.root)
            if not rel.startswith(".."):
                return _norm(rel)
        return _norm(text)

    def file_quarantined(self, path: str | os.PathLike[str]) -> bool:
        return self.relative(path) in self.files

    def keep(self, path: str | os.PathLike[str], *, index: int | None = None,
             key: str | None = None) -> bool:
        """False when the file, or this record of it (by index or sample key), is bad."""
        rel = self.relative(path)
        if rel in self.files:
            return False
        if rel not in self._record_files:
            return True
        if index is not None and index in self._by_index.get(rel, ()):
            return False
        return not (key is not None and key in self._by_key.get(rel, ()))

    def bad_indices(self, path: str | os.PathLike[str]) -> set[int]:
        return set(self._by_index.get(self.relative(path), ()))

    # -- files ------------------------------------------------------------------------------
    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "root": self.root,
                "files": [{"path": p, "reason": r} for p, r in sorted(self.files.items())],
                "records": [r.to_json() for r in sorted(
                    self.records, key=lambda r: (r.path, r.index if r.index is not None else -1,
                                                 r.key or ""))],
                "sources": self.sources,
                "counts": {"files": len(self.files), "records": len(self.records)}}

    def path_list(self) -> str:
        """Whole files only, one per line (records cannot be named in a plain list)."""
        return "".join(f"{p}\n" for p in sorted(self.files))

    def save(self, json_path: Path, list_path: Path | None = None) -> None:
        """Each file replaced whole (a loader reading a list half written would skip fewer
        files than it must); both paths are checked before either is written, and the plain
        list is renamed first, neither until both are whole (:func:`record.atomic.replacing_all`)."""
        from ckptrescue.record.atomic import replacing_all

        data = json.dumps(self.to_json(), indent=1, ensure_ascii=True, default=str) + "\n"
        paths = [p for p in (list_path, json_path) if p is not None]
        with replacing_all(*paths) as files:  # neither renamed until both are whole
            files[-1].write(data.encode("utf-8", errors="surrogateescape"))
            if list_path is not None:
                files[0].write(os.fsencode(self.path_list()))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Quarantine:
        from ckptrescue.errors import UsageError

        try:
            data = json.loads(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: not a quarantine list: {exc}") from exc
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise UsageError(f"{path}: not a quarantine list (schema {SCHEMA} expected)")
        try:
            return cls(root=str(data.get("root") or ""),
                       files={_norm(f["path"]): str(f.get("reason", "")) for f in data["files"]},
                       records=[QuarantinedRecord(_norm(r["path"]), r.get("index"),
                                                  r.get("key"), r.get("offset"),
                                                  str(r.get("reason", "")))
                                for r in data["records"]],
                       sources=list(data.get("sources", [])))
        except (KeyError, TypeError) as exc:
            raise UsageError(f"{path}: malformed quarantine list ({exc})") from exc


def build(root: str, *, audits: Iterable[dict[str, Any]] = (),
          verifies: Iterable[dict[str, Any]] = ()) -> Quarantine:
    q = Quarantine(root=root)
    for a in audits:
        q.add_audit(a)
    for v in verifies:
        q.add_verify(v)
    return q


def _norm(path: str) -> str:
    text = path.replace(os.sep, "/")
    while text.startswith("./"):
        text = text[2:]
    return os.path.normpath(text).replace(os.sep, "/") if text else text
