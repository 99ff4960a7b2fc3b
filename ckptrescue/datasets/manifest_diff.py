"""``manifest diff OLD NEW``: what changed between two ``sha256sum`` manifests, without reading
any data file.

Each name is compared by its SHA-256 only: ``added`` (in NEW only), ``removed`` (in OLD only),
``changed`` (in both, another hash), ``renamed`` (a name that left OLD and a name that arrived in
NEW with the same hash: the same bytes under a new path). When several removed and several added
names share a hash they are paired in name order; the rest stay added or removed. A name listed
twice in one manifest is compared by its last line (a finding says so when the lines disagree).

Memory stays flat in the number of entries: both manifests are streamed line by line into a
scratch SQLite database (beside the output, or in ``$TMPDIR``; removed at the end), the
comparison is SQL, and the changes are read back in name order, a chunk at a time. A line that
is not in ``sha256sum`` format (a torn last line, a foreign file) is a finding, not a stop: the
entries on it are left out of the comparison and the answer says how many.

Outputs (``-o OUT``): ``OUT`` is a ``sha256sum`` manifest of the entries of NEW that are new to
it (added, changed, renamed), so ``sha256sum -c OUT`` in the new tree verifies just what
changed; ``OUT.changes.jsonl`` holds every change, one JSON object per line (``status``,
``path``, ``sha256``, ``old_path``, ``old_sha256``), removed entries included.
"""

# the SQL here is put together from this module's fixed fragments only; values are always bound
# ruff: noqa: S608

from __future__ import annotations

import json
import os
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.walk import display, to_json_path
from ckptrescue.errors import UsageError, database
from ckptrescue.model import ArtifactData, Finding, JsonObject, Recorded, Severity

CHANGES_SUFFIX = ".changes.jsonl"
LIST_MAX = 1000  # changes kept in the step's outputs (every change is in OUT.changes.jsonl)
BAD_LINES_MAX = 20  # unparsable lines named per manifest (all are counted)
INSERT_CHUNK = 4096
STATUSES = ("added", "removed", "changed", "renamed")

_TABLES = """
CREATE TABLE side_old (rel BLOB NOT NULL, sha256 TEXT NOT NULL, lineno INTEGER NOT NULL);
CREATE TABLE side_new (rel BLOB NOT NULL, sha256 TEXT NOT NULL, lineno INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class Change:
    """One difference: ``path`` is NEW's name (OLD's for ``removed``)."""

    status: str
    rel: bytes
    sha256: str | None
    old_rel: bytes | None = None
    old_sha256: str | None = None

    def to_json(self) -> JsonObject:
        return {"status": self.status, "path": to_json_path(self.rel), "sha256": self.sha256,
                "old_path": to_json_path(self.old_rel) if self.old_rel is not None else None,
                "old_sha256": self.old_sha256}


@dataclass
class BadLine:
    manifest: str  # "old" or "new"
    lineno: int
    reason: str

    def to_json(self) -> JsonObject:
        return {"manifest": self.manifest, "line": self.lineno, "reason": self.reason}


@dataclass
class ManifestDiffResult(Recorded):
    old: str
    new: str
    output: str | None = None
    changes_file: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)  # the first LIST_MAX, in name order
    bad_lines: list[BadLine] = field(default_factory=list)
    bad_line_counts: dict[str, int] = field(default_factory=dict)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    entries: dict[str, int] = field(default_factory=dict)  # distinct names per manifest

    @property
    def differs(self) -> bool:
        return any(self.counts.get(s) for s in STATUSES)

    def answer(self) -> str:
        c = self.counts
        if not self.differs:
            text = f"manifests agree: {c.get('unchanged', 0)} entries"
        else:
            text = (f"{c.get('changed', 0)} changed, {c.get('removed', 0)} removed, "
                    f"{c.get('added', 0)} added, {c.get('renamed', 0)} renamed; "
                    f"{c.get('unchanged', 0)} unchanged")
        bad = sum(self.bad_line_counts.values())
        if bad:
            text += f"; {bad} line(s) not in sha256sum format were left out"
        return text

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        what = {"changed": (Severity.WARNING, "MD001", "changed content (another SHA-256)"),
                "removed": (Severity.WARNING, "MD002", "in OLD only (removed)"),
                "added": (Severity.INFO, "MD003", "in NEW only (added)"),
                "renamed": (Severity.INFO, "MD004", "renamed (same SHA-256, new path)")}
        for status in STATUSES:
            n = self.counts.get(status, 0)
            if not n:
                continue
            sev, code, text = what[status]
            names = [display(ch.rel) for ch in self.changes if ch.status == status][:20]
            out.append(Finding(code, sev, f"{n} entr{'y' if n == 1 else 'ies'} {text}",
                               evidence=self.new if status != "removed" else self.old,
                               source="manifest.diff",
                               details={"count": n, "first": names}))
        for side in ("old", "new"):
            n = self.bad_line_counts.get(side, 0)
            if n:
                lines = [b.to_json() for b in self.bad_lines if b.manifest == side]
                out.append(Finding("MD005", Severity.ERROR,
                                   f"{n} line(s) of the {side.upper()} manifest are not in "
                                   "sha256sum format: their entries are not compared",
                                   evidence=self.old if side == "old" else self.new,
                                   source="manifest.diff", details={"count": n, "lines": lines}))
        if self.duplicates:
            out.append(Finding("MD006", Severity.WARNING,
                               f"{len(self.duplicates)} name(s) listed twice with different "
                               "hashes: the last line of each is compared",
                               evidence=self.new, source="manifest.diff",
                               details={"names": self.duplicates[:20]}))
        return out

    def to_json(self) -> JsonObject:
        listed = len(self.changes)
        return {"old": self.old, "new": self.new, "output": self.output,
                "changes_file": self.changes_file, "counts": dict(self.counts),
                "entries": dict(self.entries),
                "changes": [c.to_json() for c in self.changes],
                "changes_omitted": max(0, sum(self.counts.get(s, 0) for s in STATUSES) - listed),
                "bad_lines": [b.to_json() for b in self.bad_lines],
                "duplicates": self.duplicates[:20], "answer": self.answer()}


def _check_input(path: str) -> Path:
    """A manifest to read: a regular file (a FIFO would block, a directory is no manifest)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the manifest: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: not a regular file (a manifest is a sha256sum text file)")
    return p


def _load(conn: sqlite3.Connection, table: str, path: Path, side: str,
          result: ManifestDiffResult, cancel: Any) -> None:
    bad = good = 0
    first_bad: sha256sum_format.ManifestSyntaxError | None = None
    rows: list[tuple[bytes, str, int]] = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            try:
                parsed = sha256sum_format.parse_line(line, lineno)
            except sha256sum_format.ManifestSyntaxError as exc:
                bad += 1
                first_bad = first_bad or exc
                if bad <= BAD_LINES_MAX:
                    result.bad_lines.append(BadLine(side, lineno, exc.reason))
                continue
            if parsed is None:
                continue
            good += 1
            rows.append((sha256sum_format.plain_name(parsed.name), parsed.sha256, lineno))
            if len(rows) >= INSERT_CHUNK:
                conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
                rows = []
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt
    if rows:
        conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
    if first_bad is not None and not good:  # a foreign file, not a manifest with a torn line:
        # refused as manifest audit and gate refuse it, not compared as an empty manifest
        raise UsageError(f"{path}: not a sha256sum manifest: {first_bad}")
    result.bad_line_counts[side] = bad


def _dedupe(conn: sqlite3.Connection, side: str, result: ManifestDiffResult) -> None:
    """``{side}``: one row per name, the last line's (names in conflict noted)."""
    conn.execute(f"CREATE INDEX side_{side}_rel ON side_{side} (rel, lineno)")
    for rel, n in conn.execute(
            f"SELECT rel, COUNT(DISTINCT sha256) FROM side_{side} GROUP BY rel "
            "HAVING COUNT(DISTINCT sha256) > 1 ORDER BY rel LIMIT 100"):
        result.duplicates.append({"manifest": side, "path": to_json_path(rel), "hashes": n})
    conn.execute(f"""CREATE TABLE {side} (rel BLOB PRIMARY KEY, sha256 TEXT NOT NULL)
                     WITHOUT ROWID""")
    conn.execute(f"""INSERT INTO {side} SELECT s.rel, s.sha256 FROM side_{side} s
                     JOIN (SELECT rel, MAX(lineno) AS last FROM side_{side} GROUP BY rel) m
                       ON s.rel = m.rel AND s.lineno = m.last""")
    conn.execute(f"DROP TABLE side_{side}")
    result.entries[side] = conn.execute(f"SELECT COUNT(*) FROM {side}").fetchone()[0]


_COMPARE = """
CREATE TABLE gone AS SELECT o.rel, o.sha256 FROM old o
    WHERE NOT EXISTS (SELECT 1 FROM new n WHERE n.rel = o.rel);
CREATE TABLE came AS SELECT n.rel, n.sha256 FROM new n
    WHERE NOT EXISTS (SELECT 1 FROM old o WHERE o.rel = n.rel);
CREATE TABLE gone_k AS SELECT rel, sha256,
    ROW_NUMBER() OVER (PARTITION BY sha256 ORDER BY rel) AS k FROM gone;
CREATE TABLE came_k AS SELECT rel, sha256,
    ROW_NUMBER() OVER (PARTITION BY sha256 ORDER BY rel) AS k FROM came;
CREATE INDEX gone_k_sk ON gone_k (sha256, k);
CREATE INDEX came_k_sk ON came_k (sha256, k);
CREATE TABLE changes (rel BLOB NOT NULL, status TEXT NOT NULL, sha256 TEXT, old_rel BLOB,
    old_sha256 TEXT);
INSERT INTO changes SELECT n.rel, 'changed', n.sha256, n.rel, o.sha256
    FROM new n JOIN old o ON o.rel = n.rel WHERE o.sha256 != n.sha256;
INSERT INTO changes SELECT c.rel, 'renamed', c.sha256, g.rel, g.sha256
    FROM came_k c JOIN gone_k g ON g.sha256 = c.sha256 AND g.k = c.k;
INSERT INTO changes SELECT c.rel, 'added', c.sha256, NULL, NULL FROM came_k c
    WHERE NOT EXISTS (SELECT 1 FROM gone_k g WHERE g.sha256 = c.sha256 AND g.k = c.k);
INSERT INTO changes SELECT g.rel, 'removed', NULL, g.rel, g.sha256 FROM gone_k g
    WHERE NOT EXISTS (SELECT 1 FROM came_k c WHERE c.sha256 = g.sha256 AND c.k = g.k);
CREATE INDEX changes_rel ON changes (rel, status);
"""


def _changes(conn: sqlite3.Connection) -> Iterator[Change]:
    cur = conn.execute("SELECT status, rel, sha256, old_rel, old_sha256 FROM changes "
                       "ORDER BY rel, status")
    while chunk := cur.fetchmany(INSERT_CHUNK):
        for status, rel, sha, old_rel, old_sha in chunk:
            renamed_from = bytes(old_rel) if status == "renamed" else None
            yield Change(status, bytes(rel), sha, renamed_from, old_sha)


def _write(out: Path, conn: sqlite3.Connection) -> Path:
    """OUT (sha256sum lines of NEW's new entries) and OUT.changes.jsonl, each written to a
    temporary file, fsynced and moved into place."""
    from ckptrescue.record.atomic import replacing_all

    changes = Path(str(out) + CHANGES_SUFFIX)
    # neither renamed until both are whole; the changes first
    with replacing_all(changes, out) as (side, text):
        for ch in _changes(conn):
            if ch.status != "removed" and ch.sha256:
                text.write(sha256sum_format.format_line(ch.sha256, ch.rel))
            side.write(json.dumps(ch.to_json(), ensure_ascii=True).encode() + b"\n")
    return changes


def diff_manifests(old: str | os.PathLike[str], new: str | os.PathLike[str], *,
                   output: str | os.PathLike[str] | None = None,
                   progress: Callable[..., None] | None = None,
                   cancel: Any = None) -> ManifestDiffResult:
    """Compare manifest ``old`` with ``new`` (both ``sha256sum`` format); with ``output``, write
    the manifest of the changes and its ``.changes.jsonl``. Reads no data file."""
    old_p, new_p = _check_input(str(old)), _check_input(str(new))
    out = Path(output) if output else None
    if out is not None:
        from ckptrescue.datasets.manifest_files import refuse_outputs

        # OUT and OUT.changes.jsonl, as every manifest writer checks them (a device node or a
        # FIFO is the kit's refusal, exit 3; a folder, a usage error)
        refuse_outputs((out, Path(str(out) + CHANGES_SUFFIX)),
                       says=f"-o names the diff's manifest ({out.name}{CHANGES_SUFFIX} goes "
                            "beside it)")
        for given in (old_p, new_p):
            if out.resolve() == given.resolve():
                raise UsageError(f"{out}: is an input manifest; write the diff elsewhere")
    result = ManifestDiffResult(old=str(old), new=str(new))
    scratch_parent = out.parent if out is not None else None
    with tempfile.TemporaryDirectory(prefix=".manifest-diff-", dir=scratch_parent) as scratch:
        db = Path(scratch) / "diff.sqlite"
        with database(db):  # its errors say which file (a full disk: ENOSPC)
            conn = sqlite3.connect(db, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=OFF")
                conn.execute("PRAGMA synchronous=OFF")
                conn.execute("PRAGMA cache_size=-8192")
                conn.executescript(_TABLES)
                conn.execute("BEGIN")
                size = old_p.stat().st_size + new_p.stat().st_size
                _load(conn, "side_old", old_p, "old", result, cancel)
                if progress:
                    progress(old_p.stat().st_size, size)
                _load(conn, "side_new", new_p, "new", result, cancel)
                if progress:
                    progress(size, size)
                conn.execute("COMMIT")
                _dedupe(conn, "old", result)
                _dedupe(conn, "new", result)
                conn.executescript(_COMPARE)
                counts = dict.fromkeys(STATUSES, 0)
                for status, n in conn.execute("SELECT status, COUNT(*) FROM changes GROUP BY status"):
                    counts[status] = n
                counts["unchanged"] = conn.execute(
                    "SELECT COUNT(*) FROM new n JOIN old o ON o.rel = n.rel "
                    "AND o.sha256 = n.sha256").fetchone()[0]
                result.counts = counts
                for ch in _changes(conn):
                    if len(result.changes) >= LIST_MAX:
                        break
                    result.changes.append(ch)
                if out is not None:
                    changes = _write(out, conn)
                    result.output, result.changes_file = str(out), str(changes)
            finally:
                conn.close()
    artifacts = []
    if result.output and result.changes_file:
        artifacts = [result.store(ArtifactData.of_file(result.output, name=Path(
                        result.output).name, kind="manifest-diff")),
                     result.store(ArtifactData.of_file(result.changes_file, name=Path(
                         result.changes_file).name, kind="manifest-diff-changes"))]
    summary = {k: v for k, v in result.to_json().items() if k != "changes"}
    result.record("manifest.diff", summary, artifacts=artifacts)
    result.findings_here()
    return result
