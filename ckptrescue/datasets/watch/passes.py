"""One watch pass: find what is new, changed or gone since the last pass, check only that.

Local trees: identity is (size, mtime_ns, inode); a pass is *full* (walk the tree) or
*targeted* (only the paths inotify reported). S3 prefixes: a listing delta by (size,
LastModified). A changed file is checked against the manifest when it lists it (SHA-256) and by
its container check (``dataset verify``'s checker: TFRecord, tar, Parquet, JSONL, .npy);
without a manifest, a file modified in place after it was first seen is itself a finding
(training data is written once). Findings are returned, never written: the engine records
them.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.codes.watch import CODES
from ckptrescue.datasets.watch.state import WatchState
from ckptrescue.model import Finding, JsonObject


@dataclass
class PassResult:
    source: str
    full: bool
    files_total: int = 0
    checked: int = 0
    new: int = 0
    changed: int = 0
    missing: int = 0
    bytes_read: int = 0
    elapsed_s: float = 0.0
    bad: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"source": self.source, "full": self.full, "files_total": self.files_total,
                "checked": self.checked, "new": self.new, "changed": self.changed,
                "missing": self.missing, "bytes_read": self.bytes_read,
                "elapsed_s": round(self.elapsed_s, 3), "bad": self.bad,
                "answer": self.answer()}

    def answer(self) -> str:
        head = (f"{'full' if self.full else 'targeted'} pass: {self.checked} file(s) checked "
                f"({self.new} new, {self.changed} changed), {self.missing} gone")
        return head + (f"; {len(self.bad)} bad" if self.bad else "; nothing bad")


def _finding(code: str, title: str, evidence: str, **details: Any) -> Finding:
    return Finding(code=code, severity=CODES[code][0], title=title, evidence=evidence,
                   source="watch", details=details)


def _manifest(path: str | None) -> dict[bytes, Any]:
    if not path:
        return {}
    from ckptrescue.datasets.audit import load_expected

    expected, _ = load_expected(path)
    return expected


def run_pass(source: str, state: WatchState, *, manifest: str | None = None,
             only: list[bytes] | None = None, endpoint_url: str | None = None,
             cancel: threading.Event | None = None) -> PassResult:
    """One pass over ``source`` (a directory or s3://bucket/prefix); see the module doc."""
    from ckptrescue.datasets.s3dataset import normalise
    from ckptrescue.stores.urls import is_s3

    started = time.monotonic()
    expected = _manifest(manifest)
    if is_s3(source):
        result = _s3_pass(normalise(source), state, expected, endpoint_url, cancel)
    else:
        result = _local_pass(Path(source), state, expected, only, cancel)
    now = time.time()
    if result.full:
        state.set_meta("last_full_pass", now)
    state.set_meta("last_pass", now)
    state.add("files_checked_total", result.checked)
    state.add("bytes_read_total", result.bytes_read)
    state.add("passes_total", 1)
    result.elapsed_s = time.monotonic() - started
    state.set_meta("last_pass_rate", result.bytes_read / result.elapsed_s
                   if result.elapsed_s > 0 else 0)
    return result


def _local_pass(root: Path, state: WatchState, expected: dict[bytes, Any],
                only: list[bytes] | None, cancel: threading.Event | None) -> PassResult:
    from ckptrescue.datasets.walk import FileEntry, walk
    from ckptrescue.errors import EvidenceError

    if not root.is_dir():
        raise EvidenceError(f"{root}: not a directory")
    root_b = os.fsencode(root)
    result = PassResult(str(root), full=only is None)
    if only is None:
        listing = walk(root)
        present = {e.rel: e for e in listing.files}
        candidates: list[bytes] = sorted(set(present) | set(state.paths()))
    else:
        present = {}
        for rel in only:
            try:
                st = os.stat(os.path.join(root_b, rel), follow_symlinks=False)
            except FileNotFoundError:
                continue
            if os.path.isfile(os.path.join(root_b, rel)):
                present[rel] = FileEntry(rel, st.st_size, st.st_mtime_ns)
        candidates = sorted(set(only))
    result.files_total = len(present) if only is None else state.counter("files_total")
    state.begin()
    try:
        for rel in candidates:
            if cancel is not None and cancel.is_set():
                break
            _local_one(root_b, rel, present.get(rel), state, expected, result)
    finally:
        state.commit()
    if only is None:
        state.set_meta("files_total", len(present))
    return result


def _local_one(root_b: bytes, rel: bytes, entry: Any, state: WatchState,
               expected: dict[bytes, Any], result: PassResult) -> None:
    seen = state.get(rel)
    shown = os.fsdecode(os.path.join(root_b, rel))
    if entry is None:
        if seen is not None and seen.status != "missing":
            result.missing += 1
            state.put(rel, size=seen.size, mtime_ns=seen.mtime_ns, ino=seen.ino,
                      status="missing", problem="gone")
            _bad(result, shown, "WA003", f"{os.fsdecode(rel)}: disappeared since the last pass")
        return
    try:
        ino = os.stat(os.path.join(root_b, rel), follow_symlinks=False).st_ino
    except OSError:
        ino = 0
    if seen is not None and (seen.size, seen.mtime_ns, seen.ino) == (entry.size,
                                                                       entry.mtime_ns, ino):
        return  # unchanged since it was checked
    modified = seen is not None and seen.status != "missing"
    result.checked += 1
    result.new += seen is None
    result.changed += modified
    problem = _check_local(root_b, entry, expected, result, shown)
    if problem is None and modified and rel not in expected:
        problem = ("WA005", f"{os.fsdecode(rel)}: modified in place after it was first seen "
                            f"(size {seen.size} -> {entry.size})")
    status = "ok" if problem is None else "bad"
    state.put(rel, size=entry.size, mtime_ns=entry.mtime_ns, ino=ino, status=status,
              problem=problem[1] if problem else "")
    if problem is not None:
        _bad(result, shown, *problem)


def _check_local(root_b: bytes, entry: Any, expected: dict[bytes, Any], result: PassResult,
                 shown: str) -> tuple[str, str] | None:
    from ckptrescue.datasets.hashing import hash_file
    from ckptrescue.datasets.verify import check_file

    rel = entry.rel
    want = expected.get(rel)
    if want is not None:
        outcome = hash_file(os.path.join(root_b, rel))
        result.bytes_read += outcome.size
        if outcome.sha256 is None:
            return ("WA004", f"{os.fsdecode(rel)}: unreadable: {outcome.error}")
        if outcome.sha256 != want.sha256:
            return ("WA001", f"{os.fsdecode(rel)}: SHA-256 differs from the manifest"
                             + (" (same size: bit rot?)" if want.size in (None, outcome.size)
                                else f" (size {outcome.size}, manifest {want.size})"))
    check = check_file(root_b, entry)
    if want is None:
        result.bytes_read += entry.size if check.format != "other" else 0
    if check.status in ("damaged", "unreadable"):
        first = check.bad_records[0].problem if check.bad_records else check.note
        code = "WA004" if check.status == "unreadable" else "WA002"
        return (code, f"{os.fsdecode(rel)}: {check.format}: {first}"
                      + (f" (+{len(check.bad_records) - 1} more bad records)"
                         if len(check.bad_records) > 1 else ""))
    return None


def _s3_pass(url: str, state: WatchState, expected: dict[bytes, Any],
             endpoint_url: str | None, cancel: threading.Event | None) -> PassResult:
    from ckptrescue.datasets.s3dataset import hash_object, list_objects
    from ckptrescue.stores.s3.client import make_client

    bucket, objects = list_objects(url, endpoint_url=endpoint_url)
    result = PassResult(url, full=True, files_total=len(objects))
    present = {o.rel: o for o in objects}
    client = None
    state.begin()
    try:
        for rel in sorted(set(present) | set(state.paths())):
            if cancel is not None and cancel.is_set():
                break
            obj = present.get(rel)
            seen = state.get(rel)
            shown = f"{url.rstrip('/')}/{os.fsdecode(rel)}"
            if obj is None:
                if seen is not None and seen.status != "missing":
                    result.missing += 1
                    state.put(rel, size=seen.size, mtime_ns=seen.mtime_ns, ino=0,
                              status="missing", problem="gone")
                    _bad(result, shown, "WA003", f"{os.fsdecode(rel)}: object deleted")
                continue
            if seen is not None and (seen.size, seen.mtime_ns) == (obj.size, obj.mtime_ns):
                continue
            modified = seen is not None and seen.status != "missing"
            result.checked += 1
            result.new += seen is None
            result.changed += modified
            problem: tuple[str, str] | None = None
            want = expected.get(rel)
            if want is not None:
                client = client or make_client(endpoint_url=endpoint_url)
                got = hash_object(client, bucket, obj)
                sha = getattr(got, "sha256", None)
                result.bytes_read += int(getattr(got, "size", 0) or 0)
                if sha is None:
                    problem = ("WA004", f"{os.fsdecode(rel)}: unreadable: "
                                        f"{getattr(got, 'error', '')}")
                elif sha != want.sha256:
                    problem = ("WA001", f"{os.fsdecode(rel)}: SHA-256 differs from the manifest")
            elif modified:
                problem = ("WA005", f"{os.fsdecode(rel)}: object rewritten after it was first "
                                    f"seen (size {seen.size} -> {obj.size})")
            state.put(rel, size=obj.size, mtime_ns=obj.mtime_ns, ino=0,
                      status="ok" if problem is None else "bad",
                      problem=problem[1] if problem else "")
            if problem is not None:
                _bad(result, shown, *problem)
    finally:
        state.commit()
    state.set_meta("files_total", len(objects))
    return result


def _bad(result: PassResult, shown: str, code: str, title: str) -> None:
    result.bad.append({"path": shown, "code": code, "problem": title})
    result.findings.append(_finding(code, title, shown))
