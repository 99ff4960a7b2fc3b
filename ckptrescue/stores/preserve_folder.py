"""Preserve into a local folder (``store preserve URL --dest DIR``)::

    objects/sha256/ab/abcdef…        content-addressed, read-only: the evidence
    layout/<key>                     hard link to it under the object's own key
    versions/<version>/<key>         (all_versions) earlier versions, same
    preserve.jsonl                   the journal: one line per object once it is in place
    inventory.json                   per object: key, version, size, sha256, stored values,
                                     verification status; hashes are the evidence's record

Everything is written only beneath the folder (``effects/beneath.py``). A rerun into the same
folder resumes (the journal names the URL and options; another URL is refused); an object whose
stored values and size are unchanged and whose copy still hashes right is not fetched again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ckptrescue.effects import beneath
from ckptrescue.effects.files import fsync
from ckptrescue.errors import RefusedError
from ckptrescue.stores.base import LocalWriteError, ObjectInfo, Store
from ckptrescue.stores.preserve import PreservedObject, PreserveResult
from ckptrescue.stores.restore import safe_relative

JOURNAL = "preserve.jsonl"
HINT = "free space on the destination (or check the disk) and run the same command again: " \
       "it resumes"


def _local(what: str, path: Path, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """A local filesystem step; its failure names the path and the operation."""
    try:
        return fn(*args, **kwargs)
    except OSError as exc:
        raise LocalWriteError(f"{path}: {exc.strerror or exc} while {what}", hint=HINT) from exc


class _Named:
    """The incoming file, named by its path when a write fails."""

    def __init__(self, fh: Any, path: Path) -> None:
        self.fh, self.name = fh, str(path)

    def write(self, data: bytes) -> int:
        return int(self.fh.write(data))


def _write_once(root: Path, tmp: Path, final: Path) -> None:
    beneath.makedirs(root, final.parent)
    if beneath.lexists(root, final):
        beneath.unlink(root, tmp)  # same content already preserved
    else:
        beneath.chmod(root, tmp, 0o444)
        beneath.rename(root, tmp, final, replace=False)


class FolderDestination:
    def __init__(self, store: Store, dest: Path, url: str, all_versions: bool) -> None:
        self.store, self.dest, self.url, self.all_versions = store, dest, url, all_versions
        self.cas = dest / "objects" / "sha256"
        self.journal = dest / JOURNAL
        self.done: dict[tuple[str, str | None], dict[str, Any]] = {}
        self.log: Any = None

    def _read_journal(self) -> None:
        """What an earlier run into the folder preserved; refused when it holds anything else."""
        if not beneath.lexists(self.dest, self.journal):
            raise RefusedError(f"{self.dest}: not empty and not an earlier preserve (no "
                               f"{JOURNAL}); preserve writes into a new folder or resumes its own")
        with beneath.open_file(self.dest, self.journal, "rb") as fh:
            lines = fh.read().splitlines()
        try:
            header = json.loads(lines[0]) if lines else {}
        except ValueError:
            header = {}
        if header.get("url") != self.url or bool(header.get("all_versions")) != (
                self.all_versions):
            raise RefusedError(f"{self.dest}: an earlier preserve of {header.get('url')!r}"
                               f"{' (all versions)' if header.get('all_versions') else ''} is "
                               "there; resume it with the same URL and options, or use a new "
                               "folder")
        for raw in lines[1:]:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue  # a line torn by a crash: that object is fetched again
            if isinstance(entry, dict) and entry.get("status") in ("match", "unverifiable",
                                                                    "mismatch"):
                self.done[(str(entry.get("key")), entry.get("version"))] = entry

    def start(self, result: PreserveResult, count: int) -> None:
        if self.dest.exists() and any(self.dest.iterdir()):
            self._read_journal()
        _local("creating the destination folders", self.cas, beneath.makedirs, self.dest,
               self.cas)
        if not self.done and not beneath.lexists(self.dest, self.journal):
            header = json.dumps({"url": self.url, "all_versions": self.all_versions})
            _local("starting the journal", self.journal, beneath.write_bytes, self.dest,
                   self.journal, (header + "\n").encode())
        self.log = _local("opening the journal", self.journal, beneath.open_file, self.dest,
                          self.journal, "ab")

    def earlier(self, obj: ObjectInfo, source: str) -> PreservedObject | None:
        entry = self.done.get((obj.key, obj.version))
        if entry is None or not self._still_preserved(entry, obj):
            return None
        return PreservedObject(obj.key, obj.version, str(entry["status"]), entry.get("size"),
                               entry.get("sha256"), entry.get("algorithm"),
                               {**(entry.get("detail") or {}), "resumed": True},
                               stored=dict(obj.hashes), path=entry.get("path"), source=source)

    def _still_preserved(self, entry: dict[str, Any], obj: ObjectInfo) -> bool:
        """The earlier copy is of this very object (same stored values and size) and its bytes
        still hash to what was recorded."""
        if entry.get("stored") != dict(obj.hashes) or entry.get("size") != obj.size \
                or not entry.get("sha256") or not entry.get("path"):
            return False
        sha = str(entry["sha256"])
        digest = hashlib.sha256()
        try:
            with beneath.open_file(self.dest, self.cas / sha[:2] / sha, "rb") as fh:
                while block := fh.read(1 << 20):
                    digest.update(block)
        except OSError:
            return False
        return digest.hexdigest() == sha and beneath.lexists(self.dest, Path(str(entry["path"])))

    def keep(self, obj: ObjectInfo, source: str, is_current: bool, n: int) -> PreservedObject:
        rel = safe_relative(obj.key)
        tmp = self.cas / f".incoming-{os.getpid()}-{n}"
        try:
            with _local("creating a file for the incoming bytes", tmp, beneath.open_file,
                        self.dest, tmp, "xb") as fh:
                fetched = self.store.fetch(obj, _Named(fh, tmp))
                _local("syncing the incoming bytes", tmp, fsync, fh)
        except BaseException:
            beneath.unlink(self.dest, tmp, missing_ok=True)
            raise
        blob = self.cas / fetched.sha256[:2] / fetched.sha256
        _local("storing the object by its SHA-256", blob, _write_once, self.dest, tmp, blob)
        place = self.dest / "layout" / rel if is_current else \
            self.dest / "versions" / str(obj.version or "unknown") / rel
        if beneath.lexists(self.dest, place):  # an earlier run's copy of an object changed since
            _local("replacing the link under its key", place, beneath.unlink, self.dest, place)
        _local("linking the object under its key", place, beneath.link, self.dest, blob, place)
        return PreservedObject(obj.key, obj.version, fetched.status, fetched.size,
                               fetched.sha256, fetched.algorithm, fetched.detail,
                               stored=dict(obj.hashes), path=str(place), source=source)

    def kept(self, obj: PreservedObject) -> None:
        if obj.status != "error":
            line = json.dumps(obj.to_json(), sort_keys=True) + "\n"
            _local("writing the journal", self.journal, _append_synced, self.log, line.encode())

    def stopped(self, result: PreserveResult, message: str) -> None:
        self.log.close()

    def finish(self, result: PreserveResult) -> None:
        self.log.close()
        inventory = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
        final = self.dest / "inventory.json"  # replaced as a whole (a resumed run lists all)
        _local("writing the inventory", final, beneath.write_bytes, self.dest, final, inventory,
               perms=0o444)


def _append_synced(fh: Any, data: bytes) -> None:
    fh.write(data)
    fsync(fh)
